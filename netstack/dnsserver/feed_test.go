package dnsserver

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// breakableStore is a real store whose watches the test can end, as a
// lost connection or a compaction error ends them.
type breakableStore struct {
	store.StateStore
	mu      sync.Mutex
	cancels []context.CancelFunc
}

func (b *breakableStore) Watch(ctx context.Context, prefix string, rev int64) (<-chan store.WatchEvent, error) {
	cctx, cancel := context.WithCancel(ctx)
	b.mu.Lock()
	b.cancels = append(b.cancels, cancel)
	b.mu.Unlock()
	return b.StateStore.Watch(cctx, prefix, rev)
}

func (b *breakableStore) breakWatches() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.cancels {
		c()
	}
	b.cancels = nil
}

// runFeed runs f until the test ends.
func runFeed(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("feed: %v", err)
		}
	})
}

// addresses answers an A question from the zone: its addresses sorted, or
// the rcode.
func addresses(h *Handler, name string) string {
	m := h.Answer(context.Background(), query(name, dns.TypeA), netip.Addr{}, false)
	if m.Rcode != dns.RcodeSuccess {
		return dns.RcodeToString[m.Rcode]
	}
	var out []string
	for _, rr := range m.Answer {
		out = append(out, rr.(*dns.A).A.String())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestFeedZone: records put and deleted in etcd show and disappear in the
// answers; after the watch ends (changes and a compaction happening
// meanwhile) the feed lists again and converges; records of another
// domain and records that do not decode are left out.
func TestFeedZone(t *testing.T) {
	etcd := storetest.New(t)
	st := &breakableStore{StateStore: etcd}
	repo := resources.New(st)
	ctx := t.Context()
	h := NewHandler(HandlerConfig{Domain: testDomain})
	runFeed(t, func(ctx context.Context) error { return FeedZone(ctx, st, h, 0, zerolog.Nop()) })
	write := func(put []api.DNSRecord, del ...api.DNSRecord) {
		t.Helper()
		var keys []string
		for _, d := range del {
			keys = append(keys, resources.DNSKey(testDomain, d.Namespace, d.Workload, d.InstanceID))
		}
		if _, err := repo.WriteDNSRecords(ctx, testDomain, put, keys); err != nil {
			t.Fatal(err)
		}
	}
	wait := func(what, name, want string) {
		t.Helper()
		polltest.Until(t, 10*time.Second, what, func() bool { return addresses(h, name) == want })
	}
	a := record("shop", "web", "web-a", "10.99.0.2")
	b := record("shop", "web", "web-b", "10.99.1.2")
	c := record("shop", "web", "web-c", "10.99.2.2")

	write([]api.DNSRecord{a})
	wait("web-a served", "web.shop.kat.test.", "10.99.0.2")
	write([]api.DNSRecord{b})
	wait("web-b added", "web.shop.kat.test.", "10.99.0.2 10.99.1.2")
	write(nil, a)
	wait("web-a removed", "web.shop.kat.test.", "10.99.1.2")
	if got := addresses(h, "web-a.web.shop.kat.test."); got != "NXDOMAIN" {
		t.Errorf("removed instance's name answers %s, want NXDOMAIN", got)
	}

	// Elsewhere and broken: left out.
	if _, err := repo.WriteDNSRecords(ctx, "other.test", []api.DNSRecord{c}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, resources.DNSKey(testDomain, "shop", "web", "web-x"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}

	st.breakWatches()
	write([]api.DNSRecord{c}, b)
	cur, err := etcd.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	wait("the feed lists again after its watch ended and a compaction", "web.shop.kat.test.", "10.99.2.2")
	write([]api.DNSRecord{a})
	wait("and watches again", "web.shop.kat.test.", "10.99.0.2 10.99.2.2")
	if got := h.Zone().soa[0].(*dns.SOA).Serial; got == 0 {
		t.Error("SOA serial 0, want the records' revision")
	}
}

// TestFeedSources: the addresses of a node's assignments map to their
// namespaces; another node's do not.
func TestFeedSources(t *testing.T) {
	st := storetest.New(t)
	repo := resources.New(st)
	src := &SourceMap{}
	runFeed(t, func(ctx context.Context) error { return FeedSources(ctx, st, "n1", src, 0, zerolog.Nop()) })
	as := []api.Assignment{
		{InstanceID: "web-a", Node: "n1", Namespace: "shop", Workload: "web", IP: netip.MustParseAddr("10.99.0.2")},
		{InstanceID: "web-b", Node: "n2", Namespace: "shop", Workload: "web", IP: netip.MustParseAddr("10.99.1.2")},
		{InstanceID: "old-a", Node: "n1", Namespace: "blog", Workload: "old"},
	}
	if _, err := repo.WriteAssignments(t.Context(), as, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "n1's instance address known", func() bool {
		ns, ok := src.NamespaceOf(netip.MustParseAddr("10.99.0.2"))
		return ok && ns == "shop"
	})
	if ns, ok := src.NamespaceOf(netip.MustParseAddr("10.99.1.2")); ok {
		t.Errorf("n2's instance address maps to %q on n1", ns)
	}
	if _, err := repo.WriteAssignments(t.Context(), nil, as[:1]); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the deleted instance's address forgotten", func() bool {
		_, ok := src.NamespaceOf(netip.MustParseAddr("10.99.0.2"))
		return !ok
	})
}

// TestWaitNodeNetwork: it returns the node's record once the leader gave
// the node a subnet, and the address its DNS listens on is the subnet's
// first.
func TestWaitNodeNetwork(t *testing.T) {
	st := storetest.New(t)
	repo := resources.New(st)
	got := make(chan api.NodeNetwork, 1)
	runFeed(t, func(ctx context.Context) error {
		nn, err := WaitNodeNetwork(ctx, st, "n1", zerolog.Nop())
		if err == nil {
			got <- nn
		}
		return nil
	})
	if _, err := repo.EnsureNodeNetwork(t.Context(), "n2", netip.MustParsePrefix("10.100.0.0/16"), 8, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.EnsureNodeNetwork(t.Context(), "n1", netip.MustParsePrefix("10.100.0.0/16"), 8, "", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case nn := <-got:
		if nn.Node != "n1" || nn.OverlayIP() != netip.MustParseAddr("10.100.1.1") {
			t.Errorf("WaitNodeNetwork = %s at %s, want n1 at 10.100.1.1", nn.Node, nn.OverlayIP())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitNodeNetwork did not return after n1 got a subnet")
	}
}
