package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// TestCollectable covers which nodes are NotReady for long enough to be
// collected, and when the next one is due.
func TestCollectable(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(5_000_000, 0).UTC()
	const loss, after = time.Minute, time.Hour
	started := t0.Add(-48 * time.Hour)
	departedAt := t0.Add(-2 * time.Hour)
	node := func(name string, beat time.Duration, mod ...func(*resources.Node)) resources.Node {
		n := resources.Node{Registration: api.NodeRegistration{Name: name, JoinedAt: t0.Add(-72 * time.Hour)},
			Status: &api.NodeStatus{AgentStartedAt: started}}
		if beat != 0 {
			n.Heartbeat = t0.Add(beat)
		}
		for _, m := range mod {
			m(&n)
		}
		return n
	}
	departed := func(n *resources.Node) {
		n.Registration.DepartedAt, n.Registration.DepartedAgentStart = &departedAt, started
	}
	tests := []struct {
		name      string
		nodes     []resources.Node
		termStart time.Time
		want      string
		wantNext  time.Time
	}{
		{name: "a Ready node is due once it is lost for long", nodes: []resources.Node{node("a", -time.Second)},
			wantNext: t0.Add(-time.Second + loss + after)},
		{name: "NotReady for less", nodes: []resources.Node{node("a", -30*time.Minute)}, wantNext: t0.Add(-30*time.Minute + loss + after)},
		{name: "NotReady for long", nodes: []resources.Node{node("a", -2*time.Hour), node("b", -time.Second)},
			want: "a", wantNext: t0.Add(-time.Second + loss + after)},
		{name: "exactly due", nodes: []resources.Node{node("a", -loss-after)}, want: "a"},
		{name: "departed counts from its departure though it beats", nodes: []resources.Node{node("a", -time.Second, departed)}, want: "a"},
		{
			name: "departed but its agent started again", nodes: []resources.Node{node("a", -time.Second, departed, func(n *resources.Node) {
				n.Status.AgentStartedAt = t0.Add(-time.Minute)
			})}, wantNext: t0.Add(-time.Second + loss + after),
		},
		{name: "never beat counts from its joining", nodes: []resources.Node{node("a", 0)}, want: "a"},
		{name: "never beat, no earlier than the term", nodes: []resources.Node{node("a", 0)}, termStart: t0.Add(-time.Minute),
			wantNext: t0.Add(-time.Minute + after)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, next := collectable(tc.nodes, t0, tc.termStart, loss, after)
			if strings.Join(got, " ") != tc.want || !next.Equal(tc.wantNext) {
				t.Errorf("collectable = %v, next %v; want %q, next %v", got, next, tc.want, tc.wantNext)
			}
		})
	}
}

// TestDepartedNodeInstancesMove: a node whose agent departs is NotReady at
// once, though it still beats: its Service instance is placed on another
// node at once, not after the node-loss timeout, with a NodeNotReady
// event; an agent started again later makes it Ready.
func TestDepartedNodeInstancesMove(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	started := time.Unix(e.base-100, 0).UTC()
	beat := func(ts int64, node string, is ...api.InstanceStatus) {
		t.Helper()
		if err := e.repo.PutNodeStatus(e.ctx, api.NodeStatus{NodeName: node, Timestamp: e.base + ts, AgentStartedAt: started,
			WorkloadInstances: is}); err != nil {
			t.Fatal(err)
		}
	}
	beat(0, "n1")
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	l, stop := e.run(Config{NodeLossTimeout: time.Hour})
	defer stop()
	polltest.Until(t, 10*time.Second, "the instance placed on n1", func() bool { return len(e.assignments("web")) == 1 })
	first := e.assignments("web")[0]
	e.register("n2", nil)
	beat(1, "n2")
	beat(1, "n1", running(first))
	polltest.Until(t, 10*time.Second, "n2 Ready and the loops idle", func() bool { return l.view.nodeReady("n2", time.Now()) && l.idle() })
	facts := resources.NewNodeFacts(e.repo, nil)
	if err := facts.RecordDeparture(e.ctx, "n1", api.NodeDeparture{AgentStartedAt: started}); err != nil {
		t.Fatal(err)
	}
	beat(2, "n1", running(first)) // the departing agent still beats while its instances move
	polltest.Until(t, 10*time.Second, "the instance moved to n2 at once", func() bool {
		as := e.assignments("web")
		return len(as) == 1 && as[0].Node == "n2"
	})
	polltest.Until(t, 10*time.Second, "NodeDeparted and NodeNotReady events", func() bool {
		evs, err := e.repo.ListEvents(e.ctx, 0)
		return err == nil && hasEvent(evs, resources.EventNodeDeparted, "n1") && hasEvent(evs, EventNodeNotReady, "n1")
	})
	// The node comes back: an agent started later reports.
	started2 := started.Add(time.Hour)
	if err := e.repo.PutNodeStatus(e.ctx, api.NodeStatus{NodeName: "n1", Timestamp: e.base + 3, AgentStartedAt: started2}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "n1 Ready again, with a NodeReady event", func() bool {
		evs, err := e.repo.ListEvents(e.ctx, 0)
		return l.view.nodeReady("n1", time.Now()) && err == nil && hasEvent(evs, EventNodeReady, "n1")
	})
}

// TestLeaderCollectsLostNodes: a node NotReady for longer than CollectAfter
// is deleted with its records through CollectNode, with a NodeCollected
// event; a Ready node is not.
func TestLeaderCollectsLostNodes(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.register("gone", nil)
	if err := e.repo.PutNodeStatus(e.ctx, api.NodeStatus{NodeName: "gone", Timestamp: e.base - 10}); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Unix(e.base, 0).UTC()}
	collect := func(ctx context.Context, name string) error { return e.repo.DeleteNode(ctx, name) }
	l, stop := e.run(Config{Now: clk.Now, NodeLossTimeout: 5 * time.Second, CollectAfter: time.Minute, CollectNode: collect})
	defer stop()
	present := func(name string) bool {
		_, err := e.repo.GetNodeRegistration(e.ctx, name)
		return err == nil
	}
	// The term began now: "gone" is NotReady from the term's start. n1
	// beats at +60 s, and the leader sees that beat before the clock moves
	// past the collection age: else n1 too is NotReady for long enough.
	later := time.Unix(e.base, 0).Add(5*time.Second + time.Minute + time.Second).UTC()
	e.report(60) // n1 stays Ready
	polltest.Until(t, 10*time.Second, "n1's beat at +60 s in the leader's view", func() bool {
		st, ok := l.view.nodes.Get(resources.NodeStatusKey("n1"))
		return ok && st.Timestamp == e.base+60
	})
	clk.set(later)
	reconcile.Poke(l.view.beatWake) // the clock moved: the node clock looks again
	polltest.Until(t, 10*time.Second, "the lost node collected", func() bool { return !present("gone") })
	if !present("n1") {
		t.Error("the Ready node n1 was collected too")
	}
	polltest.Until(t, 10*time.Second, "a NodeCollected event", func() bool {
		evs, err := e.repo.ListEvents(e.ctx, 0)
		return err == nil && hasEvent(evs, EventNodeCollected, "gone")
	})
}
