package dnsserver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"
)

// Server serves a dns.Handler over UDP and TCP on one address.
type Server struct {
	addr    string
	handler dns.Handler

	ready chan struct{}
	mu    sync.Mutex
	bound string
}

// NewServer returns a server of handler on addr ("ip:port"; port 0 picks
// one free for both UDP and TCP).
func NewServer(addr string, handler dns.Handler) *Server {
	return &Server{addr: addr, handler: handler, ready: make(chan struct{})}
}

// Ready is closed once the server listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is where the server listens ("ip:port", the same port for UDP and
// TCP), once Ready.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Run listens on the server's address, with IP_FREEBIND so the address
// need not exist yet, and serves until ctx ends; it returns nil then, and
// an error when it cannot listen.
func (s *Server) Run(ctx context.Context) error {
	pc, ln, err := listen(ctx, s.addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.bound = pc.LocalAddr().String()
	s.mu.Unlock()
	udp := &dns.Server{PacketConn: pc, Handler: s.handler}
	tcp := &dns.Server{Listener: ln, Handler: s.handler, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		IdleTimeout: func() time.Duration { return 8 * time.Second }}
	var started atomic.Int32
	notify := func() {
		if started.Add(1) == 2 {
			close(s.ready)
		}
	}
	udp.NotifyStartedFunc, tcp.NotifyStartedFunc = notify, notify
	g, gctx := errgroup.WithContext(ctx)
	for _, srv := range []*dns.Server{udp, tcp} {
		g.Go(func() error {
			if err := srv.ActivateAndServe(); err != nil && gctx.Err() == nil {
				return fmt.Errorf("serve DNS on %s: %w", s.bound, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		// A server that failed to start refuses Shutdown: ignore that.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = udp.ShutdownContext(sctx)
		_ = tcp.ShutdownContext(sctx)
		return nil
	})
	return g.Wait()
}

// listen binds UDP and then TCP to the same address; with port 0, to the
// port UDP got, trying again when TCP finds it taken.
func listen(ctx context.Context, addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("DNS listen address %q: %w", addr, err)
	}
	lc := net.ListenConfig{Control: freebind}
	var lastErr error
	for range 8 {
		pc, err := lc.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen for DNS on udp %s: %w", addr, err)
		}
		p := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, p))
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		lastErr = err
		if port != "0" {
			break
		}
	}
	return nil, nil, fmt.Errorf("listen for DNS on tcp %s: %w", addr, lastErr)
}

// Serve runs a Server of handler on addr until ctx ends and returns nil
// then; it logs where it listens, and when it cannot listen (the port
// taken, no privilege) it logs why and tries again with a capped backoff,
// so the agent runs on without DNS meanwhile.
func Serve(ctx context.Context, addr string, handler dns.Handler, log zerolog.Logger) error {
	delay := minRetry
	for ctx.Err() == nil {
		srv := NewServer(addr, handler)
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		var err error
		select {
		case <-srv.Ready():
			log.Info().Str("addr", srv.Addr()).Msg("serving DNS over UDP and TCP")
			delay = minRetry
			err = <-done
		case err = <-done:
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		log.Warn().Err(err).Dur("retry_in", delay).Msg("dns server stopped")
		sleep(ctx, delay)
		delay = min(2*delay, maxServeRetry)
	}
	return nil
}

// maxServeRetry caps the delay between attempts to listen.
const maxServeRetry = 30 * time.Second
