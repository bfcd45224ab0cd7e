package leader

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// beater heartbeats for the nodes it is told are alive, every 200 ms, as
// their agents would, until stopped.
type beater struct {
	mu    sync.Mutex
	alive map[string]bool
	stop  func()
}

func (e *leaderEnv) startBeater(nodes ...string) *beater {
	e.t.Helper()
	b := &beater{alive: map[string]bool{}}
	for _, n := range nodes {
		b.alive[n] = true
		st := api.NodeStatus{NodeName: n, Timestamp: time.Now().Unix()}
		st.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
		if err := e.repo.PutNodeStatus(e.ctx, st); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			b.mu.Lock()
			var live []string
			for n, ok := range b.alive {
				if ok {
					live = append(live, n)
				}
			}
			b.mu.Unlock()
			for _, n := range live {
				_, err := e.repo.RecordHeartbeat(ctx, api.NodeStatus{NodeName: n, Timestamp: time.Now().Unix()}, false, 0)
				if err != nil && ctx.Err() == nil {
					e.t.Errorf("heartbeat of %s: %v", n, err)
				}
			}
		}
	})
	b.stop = func() { cancel(); wg.Wait() }
	return b
}

func (b *beater) set(node string, alive bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.alive[node] = alive
}

// newTwoNodeEnv is a leaderEnv with nodes n1 and n2 heartbeating until the
// test ends.
func newTwoNodeEnv(t *testing.T) (*leaderEnv, *beater) {
	t.Helper()
	e := newLeaderEnv(t)
	e.register("n2", nil)
	b := e.startBeater("n1", "n2")
	t.Cleanup(b.stop)
	return e, b
}

// onNodes renders a workload's assignments as a count per node.
func (e *leaderEnv) onNodes(workload string) string { return perNode(e.assignments(workload)) }

// TestLeaderNodeLossAndReturn: with three Ready nodes, a Service of 6 is
// spread 2/2/2 and a DaemonService runs on each; when one node stops
// heartbeating its Service instances are replaced on the others (6 in all,
// none left there) while its DaemonService instance stays; when it beats
// again, a pass over every workload runs and its old assignments stay
// deleted.
func TestLeaderNodeLossAndReturn(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.register("n2", nil)
	e.register("n3", nil)
	b := e.startBeater("n1", "n2", "n3")
	defer b.stop()
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 6, "v1"), api.APIOwner())
	e.apply(workloadFiles(t, "dmn", quadlet.TypeDaemonService, 0, "v1"), api.APIOwner())
	l, stop := e.run(Config{NodeLossTimeout: 2 * time.Second})
	defer stop()
	polltest.Until(t, 10*time.Second, "web spread 2/2/2 and dmn on every node", func() bool {
		return e.onNodes("web") == "n1:2 n2:2 n3:2" && e.onNodes("dmn") == "n1:1 n2:1 n3:1"
	})
	var lost []string
	for _, a := range e.assignments("web") {
		if a.Node == "n3" {
			lost = append(lost, a.InstanceID)
		}
	}

	b.set("n3", false)
	polltest.Until(t, 10*time.Second, "n3's web instances replaced on n1 and n2", func() bool {
		return e.onNodes("web") == "n1:3 n2:3"
	})
	if got := e.onNodes("dmn"); got != "n1:1 n2:1 n3:1" {
		t.Errorf("dmn after n3 was lost = %q, want its instance kept on n3", got)
	}

	passes := l.placementPasses.Load()
	b.set("n3", true)
	polltest.Until(t, 10*time.Second, "a placement pass after n3 returned", func() bool {
		return l.placementPasses.Load() > passes
	})
	if got := e.onNodes("web"); got != "n1:3 n2:3" {
		t.Errorf("web after n3 returned = %q, want n1:3 n2:3 (instances are not moved back)", got)
	}
	for _, a := range e.assignments("web") {
		if slices.Contains(lost, a.InstanceID) {
			t.Errorf("replaced instance %s is assigned again", a.InstanceID)
		}
	}
}

// TestLeaderPendingReason: an instance that fits on no node is Pending
// with the scheduler's reason in the workload's status, and placed when a
// node that fits registers.
func TestLeaderPendingReason(t *testing.T) {
	t.Parallel()
	e, b := newTwoNodeEnv(t)
	files := workloadFiles(t, "zoned", quadlet.TypeService, 2, "v1")
	files["workload.kat"] = append(files["workload.kat"], "  nodeSelector:\n    zone: x\n"...)
	_, stop := e.run(Config{NodeLossTimeout: 5 * time.Second})
	defer stop()
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil || q.Workload.Spec.NodeSelector["zone"] != "x" {
		t.Fatalf("fixture: %v", err)
	}
	e.apply(files, api.APIOwner())
	polltest.Until(t, 10*time.Second, "zoned pending with a reason", func() bool {
		st := e.status("zoned")
		return st.Unplaced == 2 && st.UnplacedReason == "2 nodes: 2 nodeSelector mismatch"
	})
	if c := condition(e.status("zoned"), ConditionScheduled); c == nil || c.Reason != ReasonUnschedulable {
		t.Errorf("Scheduled condition = %+v", c)
	}
	e.register("n3", map[string]string{"zone": "x"})
	b.set("n3", true)
	polltest.Until(t, 10*time.Second, "zoned placed on n3", func() bool {
		return e.onNodes("zoned") == "n3:2" && e.status("zoned").Unplaced == 0
	})
}

// reportOn writes node's status, as its agent would, with instances
// reported running.
func (e *leaderEnv) reportOn(node string, as ...api.Assignment) {
	e.t.Helper()
	st := api.NodeStatus{NodeName: node, Timestamp: time.Now().Unix()}
	st.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
	for _, a := range as {
		st.WorkloadInstances = append(st.WorkloadInstances, running(a))
	}
	if err := e.repo.PutNodeStatus(e.ctx, st); err != nil {
		e.t.Fatal(err)
	}
}

// TestLeaderDrain: draining a node places its Service instance on another
// node first and removes it once the replacement runs, and removes its
// DaemonService instance at once.
func TestLeaderDrain(t *testing.T) {
	t.Parallel()
	e, _ := newTwoNodeEnv(t)
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	e.apply(workloadFiles(t, "dmn", quadlet.TypeDaemonService, 0, "v1"), api.APIOwner())
	_, stop := e.run(Config{NodeLossTimeout: 5 * time.Second})
	defer stop()
	polltest.Until(t, 10*time.Second, "web placed, dmn on both nodes", func() bool {
		return len(e.assignments("web")) == 1 && e.onNodes("dmn") == "n1:1 n2:1"
	})
	old := e.assignments("web")[0]
	from, to := old.Node, "n1"
	if from == "n1" {
		to = "n2"
	}
	e.reportOn(from, old)
	polltest.Until(t, 10*time.Second, "web ready", func() bool { return e.status("web").Ready == 1 })

	if _, err := e.repo.UpdateNodeRegistration(e.ctx, from, func(r *api.NodeRegistration) error {
		r.Unschedulable, r.Draining = true, true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a replacement on "+to+" and dmn off "+from, func() bool {
		return e.onNodes("web") == "n1:1 n2:1" && e.onNodes("dmn") == to+":1"
	})
	var repl api.Assignment
	for _, a := range e.assignments("web") {
		if a.Node == to {
			repl = a
		}
	}
	e.reportOn(to, repl)
	polltest.Until(t, 10*time.Second, "the drained node's instance removed", func() bool {
		return e.onNodes("web") == to+":1"
	})
	if got := e.assignments("web"); got[0].InstanceID != repl.InstanceID {
		t.Errorf("web = %v, want the replacement %s", ids(got), repl.InstanceID)
	}
}

// TestLeaderTermGraceForNodes: heartbeats reach etcd through the leader,
// so a new term finds every node's last heartbeat old after a failover.
// A node that beat before the term keeps its instances for a whole
// nodeLossTimeout from the term's start, and loses them after.
func TestLeaderTermGraceForNodes(t *testing.T) {
	t.Parallel()
	e, b := newTwoNodeEnv(t)
	b.set("n2", false)
	old := api.NodeStatus{NodeName: "n2", Timestamp: time.Now().Add(-time.Hour).Unix()}
	old.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
	if err := e.repo.PutNodeStatus(e.ctx, old); err != nil {
		t.Fatal(err)
	}
	files := workloadFiles(t, "web", quadlet.TypeService, 1, "v1")
	e.apply(files, api.APIOwner())
	w := desiredSpec(t, "web", quadlet.TypeService, 1, "v1")
	slot := 0
	a := inst(w, "n2", "x", 1)
	a.UserNSSlot = &slot
	if _, err := e.repo.WriteAssignments(e.ctx, []api.Assignment{a}, nil); err != nil {
		t.Fatal(err)
	}
	l, stop := e.run(Config{NodeLossTimeout: 2 * time.Second})
	defer stop()
	polltest.Until(t, 10*time.Second, "a placement pass", func() bool { return l.placementPasses.Load() > 0 })
	if got := e.onNodes("web"); got != "n2:1" {
		t.Errorf("web at the term's start = %q, want n2:1 (n2 not lost yet)", got)
	}
	polltest.Until(t, 10*time.Second, "web replaced on n1 once the grace ran out", func() bool {
		return e.onNodes("web") == "n1:1"
	})
}

// TestIsMemberAddress: the API server trusts the forwarded client address
// of etcd members only, as registered now.
func TestIsMemberAddress(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	for _, r := range []api.NodeRegistration{
		{Name: "m2", UID: "uid-m2", AdvertiseAddress: "10.0.0.2", EtcdMember: true},
		{Name: "w3", UID: "uid-w3", AdvertiseAddress: "10.0.0.3"},
	} {
		if err := e.repo.PutNodeRegistration(e.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	l, stop := e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "the view knows member m2", func() bool {
		return l.IsMemberAddress(netip.MustParseAddr("10.0.0.2"))
	})
	for _, a := range []string{"10.0.0.3", "10.0.0.4", "::ffff:10.0.0.3"} {
		if l.IsMemberAddress(netip.MustParseAddr(a)) {
			t.Errorf("%s counts as a member's address", a)
		}
	}
	if !l.IsMemberAddress(netip.MustParseAddr("::ffff:10.0.0.2")) {
		t.Error("m2's address in IPv4-mapped form does not count")
	}
	// A member deleted (or no longer a member) is trusted no more.
	if err := e.repo.PutNodeRegistration(e.ctx, api.NodeRegistration{Name: "m2", UID: "uid-m2", AdvertiseAddress: "10.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "m2 no longer trusted", func() bool {
		return !l.IsMemberAddress(netip.MustParseAddr("10.0.0.2"))
	})
}
