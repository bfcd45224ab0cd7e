package leader

import (
	"fmt"
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
