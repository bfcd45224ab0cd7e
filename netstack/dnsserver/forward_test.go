package dnsserver

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeUpstream is a resolver on loopback: ext.example. has an A record of
// TTL 60, big.example. ten (its UDP answer is truncated, empty), every
// other name is NXDOMAIN with an SOA of TTL 60. It counts the questions it
// gets.
type fakeUpstream struct {
	addr    string
	queries atomic.Int64
	mu      sync.Mutex
	asked   map[string]int
}

func startUpstream(t testing.TB) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{asked: map[string]int{}}
	u.addr = startServer(t, dns.HandlerFunc(u.serve))
	return u
}

func (u *fakeUpstream) serve(w dns.ResponseWriter, r *dns.Msg) {
	u.queries.Add(1)
	q := r.Question[0]
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	u.mu.Lock()
	proto := "udp"
	if tcp {
		proto = "tcp"
	}
	u.asked[dns.CanonicalName(q.Name)+" "+proto]++
	u.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	hdr := func(ttl uint32) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}
	}
	switch dns.CanonicalName(q.Name) {
	case "ext.example.":
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(60), A: net.IPv4(192, 0, 2, 10)}}
	case "big.example.":
		if !tcp {
			m.Truncated = true
			break
		}
		for i := range 10 {
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(60), A: net.IPv4(192, 0, 2, byte(20+i))})
		}
	default:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
			Ns: "ns.example.", Mbox: "h.example.", Serial: 1, Minttl: 60}}
	}
	_ = w.WriteMsg(m)
}

func (u *fakeUpstream) askedOf(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.asked[key]
}

// startServer runs a Server of h on loopback until the test ends and
// returns its address.
func startServer(t testing.TB, h dns.Handler) string {
	t.Helper()
	srv := NewServer("127.0.0.1:0", h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("server: %v", err)
	}
	return srv.Addr()
}

// clock is a settable time for the cache.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ask(t *testing.T, addr, proto, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: proto, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(query(name, qtype), addr)
	if err != nil {
		t.Fatalf("ask %s %s over %s: %v", name, dns.TypeToString[qtype], proto, err)
	}
	return r
}

// TestForwarding: names outside the cluster domain are relayed to the
// upstream and cached (a second question, in any case, does not reach it)
// for their TTL capped at 30 s, negative answers for 5 s; a truncated UDP
// answer is asked again over TCP; cluster names never reach the upstream.
func TestForwarding(t *testing.T) {
	up := startUpstream(t)
	clk := &clock{t: time.Unix(1_000_000, 0)}
	h := NewHandler(HandlerConfig{Domain: testDomain, Upstreams: []string{up.addr}, Now: clk.now})
	h.SetRecords(testRecords(), 1)
	addr := startServer(t, h)

	r := ask(t, addr, "udp", "ext.example.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.10" {
		t.Fatalf("ext.example. = %s, want 192.0.2.10 relayed", render(r))
	}
	if ttl := r.Answer[0].Header().Ttl; ttl != 60 {
		t.Errorf("first answer's TTL %d, want the upstream's 60", ttl)
	}
	clk.add(10 * time.Second)
	r = ask(t, addr, "tcp", "EXT.example.", dns.TypeA)
	if n := up.askedOf("ext.example. udp"); n != 1 || len(r.Answer) != 1 {
		t.Errorf("after a second question: upstream asked %d times, answer %s; want 1 and the cached answer", n, render(r))
	}
	if ttl := r.Answer[0].Header().Ttl; ttl != 50 {
		t.Errorf("cached answer's TTL %d after 10 s, want 50", ttl)
	}
	clk.add(21 * time.Second) // 31 s: past the 30 s cap
	ask(t, addr, "udp", "ext.example.", dns.TypeA)
	if n := up.askedOf("ext.example. udp"); n != 2 {
		t.Errorf("after 31 s: upstream asked %d times, want 2 (cache capped at 30 s)", n)
	}

	for range 2 {
		if r := ask(t, addr, "udp", "missing.example.", dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("missing.example. = %s, want NXDOMAIN", render(r))
		}
	}
	if n := up.askedOf("missing.example. udp"); n != 1 {
		t.Errorf("negative answer: upstream asked %d times, want 1 (cached)", n)
	}
	clk.add(6 * time.Second)
	ask(t, addr, "udp", "missing.example.", dns.TypeA)
	if n := up.askedOf("missing.example. udp"); n != 2 {
		t.Errorf("negative answer after 6 s: upstream asked %d times, want 2 (cached 5 s at most)", n)
	}

	r = ask(t, addr, "tcp", "big.example.", dns.TypeA)
	if len(r.Answer) != 10 || up.askedOf("big.example. tcp") != 1 {
		t.Errorf("big.example. = %d answers, upstream asked %d times over TCP; want 10 answers after a TCP retry",
			len(r.Answer), up.askedOf("big.example. tcp"))
	}

	before := up.queries.Load()
	if r := ask(t, addr, "udp", "nope.shop.kat.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("nope.shop.kat.test. = %s, want NXDOMAIN", render(r))
	}
	if n := up.queries.Load() - before; n != 0 {
		t.Errorf("a cluster name reached the upstream %d times", n)
	}
}

// TestForwardingUpstreamDown: with no upstream answering, the client gets
// SERVFAIL, and nothing is cached: the next question asks again.
func TestForwardingUpstreamDown(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := pc.LocalAddr().String()
	pc.Close()
	h := NewHandler(HandlerConfig{Domain: testDomain, Upstreams: []string{dead}, Timeout: 300 * time.Millisecond})
	addr := startServer(t, h)
	for range 2 {
		if r := ask(t, addr, "udp", "ext.example.", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
			t.Errorf("with the upstream down: %s, want SERVFAIL", render(r))
		}
	}
	if n := h.fwd.cache.len(); n != 0 {
		t.Errorf("%d failures cached", n)
	}
}

// TestAnswerCacheBounded: the cache never holds more than its size.
func TestAnswerCacheBounded(t *testing.T) {
	c := &answerCache{max: 3, m: map[cacheKey]*cacheEntry{}}
	now := time.Unix(0, 0)
	for i := range 10 {
		c.put(cacheKey{name: string(rune('a'+i)) + ".", qtype: dns.TypeA}, new(dns.Msg), now, time.Minute)
		if c.len() > 3 {
			t.Fatalf("after %d puts the cache holds %d", i+1, c.len())
		}
	}
}

func TestHostUpstreams(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	conf := "search example.org\nnameserver 10.0.0.1\nnameserver 10.100.0.1\nnameserver ::1\noptions ndots:2\n"
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := HostUpstreams(path, netip.MustParseAddr("10.100.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.1:53", "[::1]:53"}; !slices.Equal(got, want) {
		t.Errorf("HostUpstreams = %q, want %q (the node's own address left out)", got, want)
	}
	if _, err := HostUpstreams(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("HostUpstreams of a missing file: no error")
	}
}

// TestServerBindsAbsentAddress: with IP_FREEBIND the server listens on an
// address no interface has yet (the overlay address before the overlay is
// up), over UDP and TCP on the same port.
func TestServerBindsAbsentAddress(t *testing.T) {
	srv := NewServer("198.18.77.1:0", testHandler(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-srv.Ready():
		if host, _, _ := net.SplitHostPort(srv.Addr()); host != "198.18.77.1" {
			t.Errorf("listening on %s, want 198.18.77.1", srv.Addr())
		}
	case err := <-done:
		t.Fatalf("listen on an address no interface has: %v", err)
	}
}
