package haproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestHAProxyGrowsItsPool runs the real haproxy: 70 workloads need more
// backends than the first pool's 64, so Sync grows it (a reload) and
// routes every one; a route with 70 servers answers from all of them, and
// keeps answering every request (a connection each) during the growth:
// the new worker starts with the old one's routes and servers; a reload HAProxy refuses
// leaves it serving every route, and the configuration file as it was.
func TestHAProxyGrowsItsPool(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	ctx := context.Background()
	var hits [3]atomic.Int64
	addrs := []netip.AddrPort{backend(t, "s0", &hits[0]), backend(t, "s1", &hits[1]), backend(t, "s2", &hits[2])}
	sync := func(grow bool, rs ...api.IngressRoutes) (Applied, error) {
		return Sync(ctx, p.client, p.dir, p.dir, DesiredOf(rs), grow)
	}

	// Before: one workload whose route has 70 servers (3 addresses).
	var many []api.IngressBackend
	for i := range 70 {
		many = append(many, api.IngressBackend{InstanceID: fmt.Sprintf("big-%02d", i), Addr: addrs[i%3]})
	}
	all := []api.IngressRoutes{routes("d", "big", rule("big.test", "/", 80, many...))}
	if a, err := sync(true, all...); err != nil || a.Grown || a.Slots != DefaultSlots {
		t.Fatalf("first sync = %+v, %v; want the first pool, not grown", a, err)
	}
	o, err := p.client.Observe(ctx, p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(o.Servers[SlotName(0)]); n != 70 {
		t.Fatalf("big.test's backend has %d servers, want 70", n)
	}
	for range 9 {
		if got := p.get("big.test", "/"); !strings.HasPrefix(got, "200 s") {
			t.Fatalf("big.test = %q", got)
		}
	}
	if hits[0].Load() == 0 || hits[1].Load() == 0 || hits[2].Load() == 0 {
		t.Errorf("9 requests to big.test reached %d, %d, %d: want every address", hits[0].Load(), hits[1].Load(), hits[2].Load())
	}

	// A stream on big.test while 70 more workloads are added: the pool grows.
	var requests, failures atomic.Int64
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sctx.Err() == nil {
			requests.Add(1)
			if got := p.get("big.test", "/"); !strings.HasPrefix(got, "200 s") {
				failures.Add(1)
			}
		}
	}()
	for i := range 70 {
		all = append(all, routes("d", fmt.Sprintf("w%02d", i), rule(fmt.Sprintf("w%02d.test", i), "/", 80,
			api.IngressBackend{InstanceID: fmt.Sprintf("w%02d-1", i), Addr: addrs[i%3]})))
	}
	start := time.Now()
	a, err := sync(true, all...)
	took := time.Since(start)
	if err != nil || !a.Grown || a.Slots != 2*DefaultSlots {
		t.Fatalf("sync of 71 workloads = %+v, %v; want the pool grown to %d", a, err, 2*DefaultSlots)
	}
	for i := range 70 {
		host := fmt.Sprintf("w%02d.test", i)
		if got := p.get(host, "/"); got != fmt.Sprintf("200 s%d", i%3) {
			t.Errorf("%s = %q, want s%d", host, got, i%3)
		}
	}
	n := requests.Load() + 20
	polltest.Until(t, 10*time.Second, "20 more requests on big.test", func() bool { return requests.Load() >= n })
	stop()
	<-done
	if failures.Load() != 0 {
		t.Errorf("%d of %d requests to big.test failed while the pool grew", failures.Load(), requests.Load())
	}
	t.Logf("growth to %d backends and a full apply (%d commands) took %s; big.test meanwhile: %d requests, %d failed",
		a.Slots, a.Commands, took.Round(time.Millisecond), requests.Load(), failures.Load())
	if cmds, err := Plan(DesiredOf(all), mustObserve(t, p), p.dir, a.Slots); err != nil || len(cmds) != 0 {
		t.Errorf("plan after the growth = %q, %v; want nothing to do", cmds, err)
	}

	// A reload HAProxy refuses: every route still answers, and the file is
	// as it was.
	file := filepath.Join(p.dir, ConfigFile)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("global\n"), []byte("global\n    no-such-keyword\n"), 1)
	if err := os.WriteFile(file, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	err = Grow(ctx, p.dir, mustObserve(t, p), 2*a.Slots)
	if !errors.Is(err, ErrReloadFailed) {
		t.Fatalf("Grow with a configuration HAProxy refuses = %v, want ErrReloadFailed", err)
	}
	t.Logf("refused reload: %v", err)
	if now, _ := os.ReadFile(file); !bytes.Equal(now, bad) {
		t.Errorf("the configuration file changed after a refused reload")
	}
	for _, host := range []string{"big.test", "w00.test", "w69.test"} {
		if got := p.get(host, "/"); !strings.HasPrefix(got, "200 s") {
			t.Errorf("after a refused reload %s = %q, want it still served", host, got)
		}
	}
	if o := mustObserve(t, p); o.Slots != a.Slots {
		t.Errorf("after a refused reload the pool has %d backends, want the %d it had", o.Slots, a.Slots)
	}
}

func mustObserve(t *testing.T, p *proxy) Observed {
	t.Helper()
	o, err := p.client.Observe(context.Background(), p.dir)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
