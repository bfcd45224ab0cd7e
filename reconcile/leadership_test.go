package reconcile_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/metrics/metricstest"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// candidate runs a Leadership whose term has two loops that record, per
// term, when they run.
type candidate struct {
	id string
	st *store.Etcd
	l  *reconcile.Leadership

	mu      sync.Mutex
	running int // loops running now
	terms   int // terms started
	// fail makes the next term's first loop fail at once.
	fail bool
}

func newCandidate(t *testing.T, cli *clientv3.Client, id string) *candidate {
	t.Helper()
	c := &candidate{id: id, st: store.New(cli)}
	t.Cleanup(func() { _ = c.st.Close() })
	loop := func(first bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			c.mu.Lock()
			c.running++
			fail := first && c.fail
			c.fail = c.fail && !first
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				c.running--
				c.mu.Unlock()
			}()
			if fail {
				return errors.New("loop broke")
			}
			<-ctx.Done()
			return nil
		}
	}
	c.l = &reconcile.Leadership{
		Store: c.st, ID: id, LeaseTTLSeconds: 60, RetryDelay: 10 * time.Millisecond,
		Term: func(context.Context) ([]reconcile.Loop, error) {
			c.mu.Lock()
			c.terms++
			c.mu.Unlock()
			return []reconcile.Loop{{Name: "first", Run: loop(true)}, {Name: "second", Run: loop(false)}}, nil
		},
	}
	return c
}

func (c *candidate) state() (running, terms int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running, c.terms
}

// TestLeadershipMovesLoops: the loops of a term run only while their
// candidate leads; when leadership is lost every one of them stops, and the
// next leader (another candidate, or the same one again) starts them afresh.
// A loop that fails ends the term: its candidate resigns and campaigns again.
func TestLeadershipMovesLoops(t *testing.T) {
	emb := storetest.NewEmbedded(t)
	cli := emb.Client()
	ctx, cancel := context.WithCancel(t.Context())
	a, b := newCandidate(t, cli, "a"), newCandidate(t, cli, "b")
	var wg sync.WaitGroup
	for _, c := range []*candidate{a, b} {
		wg.Go(func() {
			if err := c.l.Run(ctx); err != nil {
				t.Errorf("%s: %v", c.id, err)
			}
		})
	}
	leaderID := func() string {
		id, err := a.st.GetLeader(ctx)
		if err != nil {
			return ""
		}
		return id
	}
	byID := map[string]*candidate{"a": a, "b": b}
	// Exactly one candidate runs both loops; the other none.
	waitOneLeading := func(t *testing.T, what string) *candidate {
		t.Helper()
		var lead *candidate
		polltest.Until(t, 10*time.Second, what, func() bool {
			lead = byID[leaderID()]
			if lead == nil {
				return false
			}
			ra, _ := a.state()
			rb, _ := b.state()
			other := a
			if lead == a {
				other = b
			}
			ro, _ := other.state()
			rl, _ := lead.state()
			return rl == 2 && ro == 0 && ra+rb == 2
		})
		return lead
	}
	first := waitOneLeading(t, "one candidate leads and runs its loops")
	_, termsBefore := first.state()

	// Leadership lost: the leader key vanishes (what a lost lease does).
	resp, err := cli.Get(ctx, store.DefaultElectionPrefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read election keys: %v (%d keys)", err, len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == first.id {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
		}
	}
	second := waitOneLeading(t, "leadership moves after the leader key is deleted")
	if second == first {
		if _, terms := first.state(); terms <= termsBefore {
			t.Fatalf("%s leads again without a new term (%d terms)", first.id, terms)
		}
	}

	// A failing loop ends the term: its candidate resigns and campaigns
	// again after RetryDelay, so the other candidate, campaigning beside it,
	// takes over. Each candidate in turn leads one term whose loop fails.
	// The candidate to fail is the one waiting, with its candidacy key in
	// etcd before the leader steps down: it is next in line, whatever the
	// load (the step-down candidate's new key comes after it).
	campaigning := func(id string) bool {
		resp, err := cli.Get(ctx, store.DefaultElectionPrefix, clientv3.WithPrefix())
		if err != nil {
			return false
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == id {
				return true
			}
		}
		return false
	}
	for _, f := range []*candidate{a, b} {
		lead := waitOneLeading(t, "one candidate leads before "+f.id+"'s failing term")
		if lead == f {
			// Hand the lead to the other candidate, next in line.
			other := map[*candidate]*candidate{a: b, b: a}[f]
			polltest.Until(t, 10*time.Second, other.id+" campaigns beside the leader", func() bool { return campaigning(other.id) })
			if err := f.st.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if lead = waitOneLeading(t, "the other candidate leads after "+f.id+" resigned"); lead == f {
				t.Fatalf("%s leads again after resigning although %s campaigned before it", f.id, other.id)
			}
		}
		polltest.Until(t, 10*time.Second, f.id+" campaigns beside the leader", func() bool { return campaigning(f.id) })
		f.mu.Lock()
		f.fail = true
		f.mu.Unlock()
		if err := lead.st.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		polltest.Until(t, 10*time.Second, f.id+" led a term whose loop failed", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return !f.fail
		})
		waitOneLeading(t, "one leader running its loops after "+f.id+"'s failed term")
	}

	cancel()
	wg.Wait()
	for _, c := range []*candidate{a, b} {
		if r, _ := c.state(); r != 0 {
			t.Errorf("%s: %d loops still running after Run returned", c.id, r)
		}
	}
	if id, err := a.st.GetLeader(context.Background()); err == nil {
		t.Errorf("leader %q still recorded after both candidates stopped: Run must resign", id)
	}
}

// TestLeadershipMetrics: kat_leader is 1 while the candidate leads, and
// each term's start and end count as a leader change. Not parallel: the
// families have no label of this test's own.
func TestLeadershipMetrics(t *testing.T) {
	value := func(family string, labels map[string]string) float64 { return metricstest.Value(t, family, labels) }
	elected := map[string]string{"change": metrics.ChangeElected}
	lost := map[string]string{"change": metrics.ChangeLost}
	electedBefore, lostBefore := value("kat_leader_changes_total", elected), value("kat_leader_changes_total", lost)
	emb := storetest.NewEmbedded(t)
	c := newCandidate(t, emb.Client(), "m")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.l.Run(ctx) }()
	polltest.Until(t, 10*time.Second, "the candidate leads", func() bool {
		running, _ := c.state()
		return running == 2 && value("kat_leader", nil) == 1
	})
	if got := value("kat_leader_changes_total", elected) - electedBefore; got != 1 {
		t.Errorf("elected changes moved by %v, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if value("kat_leader", nil) != 0 {
		t.Error("kat_leader is still 1 after the candidate stopped")
	}
	if got := value("kat_leader_changes_total", lost) - lostBefore; got != 1 {
		t.Errorf("lost changes moved by %v, want 1", got)
	}
}
