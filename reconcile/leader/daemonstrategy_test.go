package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

// daemonWorkload is a DaemonService "agent" of ns1 running cmd, with
// updateStrategy (YAML lines under it, indented four spaces) when not empty.
func daemonWorkload(t testing.TB, gen int64, cmd, strategy string) workload {
	t.Helper()
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: "agent", Type: quadlet.TypeDaemonService, Generation: gen},
		daemonFiles(t, cmd, strategy))
}

func daemonFiles(t testing.TB, cmd, strategy string) map[string][]byte {
	t.Helper()
	us := ""
	if strategy != "" {
		us = "  updateStrategy:\n" + strategy
	}
	files := map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: agent
  namespace: ns1
spec:
  type: DaemonService
%s  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", %q]
`, us, cmd)}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return files
}

// TestSimultaneousDaemonServiceStopsOldInstancesFirst: a DaemonService
// updated Simultaneous stops its old instance on every node before any new
// one starts, as a Service does (docs/quadlet-reference.md says so), and
// starts the new ones once no old one is left.
func TestSimultaneousDaemonServiceStopsOldInstancesFirst(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	const simultaneous = "    type: Simultaneous\n"
	v1, v2 := daemonWorkload(t, 1, "v1", simultaneous), daemonWorkload(t, 2, "v2", simultaneous)
	nodes := []sched.Node{node("a"), node("b"), node("c")}
	old := []api.Assignment{inst(v1, "a", "x", 1), inst(v1, "b", "y", 1), inst(v1, "c", "z", 1)}
	ready := map[string]api.InstanceStatus{}
	for _, a := range old {
		ready[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy}
	}
	n := 0
	suffix := func() string { n++; return fmt.Sprint("s", n) }
	plan := PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{v2}, Current: old, Reported: ready,
		Now: now, DrainDelay: 2 * time.Second, NewSuffix: suffix})
	if len(plan.Put) != 0 || len(plan.Leave)+len(plan.Delete) != 3 {
		t.Fatalf("with old instances running: put %v, leave %v, delete %v; want every old instance stopped and none started",
			ids(plan.Put), ids(plan.Leave), ids(plan.Delete))
	}
	leaving := append(plan.Leave, plan.Delete...)
	for i := range leaving {
		leaving[i].LeavingAt = now
	}
	plan = PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{v2}, Current: leaving,
		Now: now.Add(time.Second), DrainDelay: 2 * time.Second, NewSuffix: suffix})
	if len(plan.Put) != 0 {
		t.Fatalf("while old instances are leaving: put %v; want none started", ids(plan.Put))
	}
	plan = PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{v2}, Now: now.Add(3 * time.Second),
		DrainDelay: 2 * time.Second, NewSuffix: suffix})
	if got := perNode(plan.Put); got != "a:1 b:1 c:1" {
		t.Fatalf("once no old instance is left: puts %s, want one new instance on every node", got)
	}
	for _, a := range plan.Put {
		if a.TemplateHash != v2.Spec.TemplateHash {
			t.Errorf("new instance %s runs template %s, want generation 2's", a.InstanceID, a.TemplateHash)
		}
	}
}

// TestLeaderRollsBackAFailedDaemonUpdate: with the default autoRollback, a
// DaemonService whose node-by-node update fails does not keep the new
// generation: on a real etcd the leader marks it RolloutFailed
// (NodeUpdateFailed) and applies generation 1's files again as generation
// 3, and the node ends with its old instance only, never stopped.
func TestLeaderRollsBackAFailedDaemonUpdate(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	_, stop := e.run(Config{DrainDelay: 100 * time.Millisecond})
	defer stop()
	v1 := daemonFiles(t, "v1", "")
	e.apply(v1, api.APIOwner())
	polltest.Until(t, 10*time.Second, "generation 1's instance on n1", func() bool { return len(e.assignments("agent")) == 1 })
	old := e.assignments("agent")[0]
	e.report(1, running(old))
	polltest.Until(t, 10*time.Second, "generation 1 rolled out", func() bool {
		ro, _, err := e.repo.GetRollout(e.ctx, "ns1", "agent")
		return err == nil && ro.Outcomes[1] == api.OutcomeSucceeded
	})
	v1Meta, err := e.repo.GetWorkload(e.ctx, "ns1", "agent")
	if err != nil {
		t.Fatal(err)
	}

	e.apply(daemonFiles(t, "v2", ""), api.APIOwner())
	failed := running(e.instanceOf("agent", 2))
	failed.Phase, failed.Message = api.InstanceFailed, "exited 3"
	e.report(2, running(old), failed)

	w := e.generation("agent", 3)
	if rb := w.Rollback; rb == nil || *rb != (api.RollbackRef{From: 2, To: 1, Auto: true}) || w.SpecHash != v1Meta.SpecHash {
		t.Fatalf("generation 3: rollback %+v, spec hash %s; want generation 1's files (%s) applied by an automatic rollback",
			w.Rollback, w.SpecHash, v1Meta.SpecHash)
	}
	polltest.Until(t, 10*time.Second, "RolloutFailed with NodeUpdateFailed", func() bool {
		c := condition(e.status("agent"), ConditionRolloutFailed)
		return c != nil && c.Reason == ReasonNodeUpdateFailed && strings.Contains(c.Message, "rolling back to generation 1's files")
	})
	polltest.Until(t, 10*time.Second, "only the old instance left on n1", func() bool {
		as := e.assignments("agent")
		return len(as) == 1 && as[0].InstanceID == old.InstanceID
	})
}

// instanceOf waits for an instance of generation gen of workload and
// returns it.
func (e *leaderEnv) instanceOf(workload string, gen int64) api.Assignment {
	e.t.Helper()
	var found api.Assignment
	polltest.Until(e.t, 10*time.Second, fmt.Sprintf("an instance of %s's generation %d", workload, gen), func() bool {
		for _, a := range e.assignments(workload) {
			if a.Generation == gen {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// generation waits until workload name of ns1 is at generation gen (a
// rollback writes one) and returns it.
func (e *leaderEnv) generation(name string, gen int64) *api.Workload {
	e.t.Helper()
	var w *api.Workload
	polltest.Until(e.t, 20*time.Second, fmt.Sprintf("%s at generation %d", name, gen), func() bool {
		var err error
		w, err = e.repo.GetWorkload(e.ctx, "ns1", name)
		return err == nil && w.Generation == gen
	})
	return w
}

// TestDaemonServiceStatusSurvivesANewTerm: a DaemonService no node is
// eligible for is Ready with 0/0 instances, and a new leader term leaves
// its status as it was: its desired count is placement's, so the status
// pass does not guess one (and flap to Pending and back) before placement
// of the new term has counted the eligible nodes.
func TestDaemonServiceStatusSurvivesANewTerm(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	files := daemonFiles(t, "sleep 1000", "")
	files["workload.kat"] = []byte(strings.Replace(string(files["workload.kat"]), "  source:\n",
		"  nodeSelector:\n    kat.dws.rip/role: ingress\n  source:\n", 1))
	e.apply(files, api.Owner{Kind: api.OwnerAPI})
	_, stop := e.run(Config{})
	var first api.WorkloadStatus
	polltest.Until(t, 10*time.Second, "the DaemonService Ready with 0/0 instances", func() bool {
		first = e.status("agent")
		c := condition(first, ConditionReady)
		return first.Desired == 0 && c != nil && c.Status == api.ConditionTrue
	})
	stop()
	for term := 2; term <= 4; term++ {
		l, stop := e.run(Config{})
		polltest.Until(t, 10*time.Second, "a status pass of the new term", func() bool { return l.derived.Load() > 0 })
		stop()
		if got := e.status("agent"); !statusEqual(got, first) || !got.UpdatedAt.Equal(first.UpdatedAt) {
			t.Fatalf("term %d rewrote the status\n got %+v\nwant %+v", term, got, first)
		}
	}
}

// proxyDaemon is a DaemonService "agent" of ns1 publishing host port 80,
// running cmd, with the container's env lines (indented six spaces) when
// not empty.
func proxyDaemon(t *testing.T, gen int64, cmd, env string) workload {
	t.Helper()
	files := daemonFiles(t, cmd, "")
	if env != "" {
		files["workload.kat"] = append(files["workload.kat"], []byte("    env:\n"+env)...)
	}
	files["VirtualLoadBalancer.kat"] = []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: VirtualLoadBalancer\nspec:\n  ports: [{name: http, containerPort: 80}]\n")
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: "agent", Type: quadlet.TypeDaemonService, Generation: gen}, files)
}

// TestPortPublishingDaemonOutsideNodeByNodeStopsFirst: when no node-by-node
// update plans a DaemonService that publishes host ports (its update
// record is Complete for the target, so the update declines), a node's old
// instance leaves before a new one is placed there (never beside it, where
// it could not bind the port), one node at a time, the next only once the
// new instances are ready; and a blocked new spec (a missing secret) keeps
// every old instance instead of stopping them all.
func TestPortPublishingDaemonOutsideNodeByNodeStopsFirst(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	v1, v2 := proxyDaemon(t, 1, "v1", ""), proxyDaemon(t, 2, "v2", "")
	nodes := []sched.Node{node("a"), node("b")}
	running := map[string]api.InstanceStatus{}
	ready := func(as ...api.Assignment) {
		for _, a := range as {
			running[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy}
		}
	}
	cur := []api.Assignment{inst(v1, "a", "x", 1), inst(v1, "b", "y", 1)}
	ready(cur...)
	n := 0
	suffix := func() string { n++; return fmt.Sprint("s", n) }
	plan := func(w workload) AssignmentPlan {
		t.Helper()
		now = now.Add(time.Second)
		rec := &api.DaemonRolloutRecord{DaemonRollout: api.DaemonRollout{Namespace: "ns1", Workload: "agent",
			Phase: api.RolloutComplete, TargetGeneration: w.Meta.Generation, TargetTemplate: w.Spec.TemplateHash}}
		return PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{w}, Current: cur, Reported: running,
			DaemonRollouts: map[string]*api.DaemonRolloutRecord{"ns1/agent": rec},
			Now:            now, DrainDelay: 2 * time.Second, NewSuffix: suffix})
	}
	// apply makes the plan what runs: puts added, leaving instances marked,
	// deletions gone.
	apply := func(p AssignmentPlan) {
		t.Helper()
		gone := map[string]bool{}
		for _, a := range p.Delete {
			gone[a.InstanceID] = true
		}
		leave := map[string]bool{}
		for _, a := range p.Leave {
			leave[a.InstanceID] = true
		}
		cur = slices.DeleteFunc(cur, func(a api.Assignment) bool { return gone[a.InstanceID] })
		for i := range cur {
			if leave[cur[i].InstanceID] {
				cur[i].LeavingAt = now
			}
		}
		cur = append(cur, p.Put...)
	}
	describe := func(p AssignmentPlan) string {
		return fmt.Sprintf("put %s, leave %s, delete %s", perNode(p.Put), perNode(p.Leave), perNode(p.Delete))
	}

	blocked := proxyDaemon(t, 2, "v2", "      - name: P\n        valueFrom: {secretKeyRef: {name: nope, key: k}}\n")
	if p := plan(blocked); len(p.Put)+len(p.Leave)+len(p.Delete) != 0 {
		t.Fatalf("a blocked spec: %s; want every old instance kept and nothing placed", describe(p))
	}

	for i, step := range []struct{ what, want string }{
		{"old instances on a and b", "put , leave a:1, delete "},
		{"a's old instance leaving", "put , leave , delete a:1"},
		{"a's old instance gone", "put a:1, leave , delete "},
		{"a's new instance not ready", "put , leave , delete "},
		{"a's new instance ready", "put , leave b:1, delete "},
		{"b's old instance leaving", "put , leave , delete b:1"},
		{"b's old instance gone", "put b:1, leave , delete "},
	} {
		if step.what == "a's new instance ready" {
			for _, a := range cur {
				if a.TemplateHash == v2.Spec.TemplateHash {
					ready(a)
				}
			}
		}
		if step.what == "a's old instance leaving" || step.what == "b's old instance leaving" {
			now = now.Add(2 * time.Second) // the drain delay ends
		}
		p := plan(v2)
		if got := describe(p); got != step.want {
			t.Fatalf("step %d (%s): %s; want %s", i, step.what, got, step.want)
		}
		for _, a := range p.Put {
			for _, o := range cur {
				if o.Node == a.Node {
					t.Fatalf("step %d: a new instance placed on %s beside %s", i, a.Node, o.InstanceID)
				}
			}
		}
		apply(p)
	}
}
