package store_test

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"kat.dws.rip/kat/store"
)

// cutProxy forwards connections from a unix socket to another one and can
// cut every connection at once, as a network partition would.
type cutProxy struct {
	path   string // where the proxy listens
	target string // where it forwards to

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// start listens and forwards until cut.
func (p *cutProxy) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			if !p.track(c, u) {
				return
			}
			p.wg.Add(2)
			go p.pipe(u, c)
			go p.pipe(c, u)
		}
	}()
}

// track registers a connection pair unless the proxy was cut meanwhile.
func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies src to dst, then closes both.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

// cut stops listening, closes every connection and waits for the
// forwarding goroutines. It is safe to call when already cut.
func (p *cutProxy) cut() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// dialThroughProxy returns a store whose client reaches emb only through a
// cutProxy, and the proxy, both closed when the test ends.
func dialThroughProxy(t *testing.T, ctx context.Context, emb *store.Embedded) (*store.Etcd, *cutProxy) {
	t.Helper()
	dir, err := os.MkdirTemp("", "kat-proxy-") //nolint:usetesting // unix socket paths must stay short; t.TempDir paths can exceed 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &cutProxy{path: filepath.Join(dir, "etcd"), target: strings.TrimPrefix(emb.ClientURLs()[0], "unix://")}
	p.start(t)
	t.Cleanup(p.cut)
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{"unix://" + p.path}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, p
}
