package leader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

// blockedSpecs are the ways a new spec cannot be placed: container lines
// (indented four spaces) it adds, or, when empty, a request error set on
// the parsed spec (the parser rejects a quantity it cannot read; the
// planner's request error covers what gets past it), and what the
// scheduling's reason must name.
var blockedSpecs = []struct{ name, container, reason string }{
	{"missing secret", "    env:\n      - name: P\n        valueFrom: {secretKeyRef: {name: nope, key: k}}\n",
		"secret ns1/nope does not exist"},
	{"resources that do not parse", "", "invalid memory quantity"},
}

// blockSpec makes w's spec blocked the i-th way of blockedSpecs.
func blockSpec(t *testing.T, w workload, i int) workload {
	t.Helper()
	if c := blockedSpecs[i].container; c != "" {
		w.Files["workload.kat"] = append(w.Files["workload.kat"], c...)
		return parsedWorkload(t, w.Meta, w.Files)
	}
	w.Spec.RequestErr = fmt.Errorf("request of workload %s: invalid memory quantity %q", w.Key(), "lots")
	return w
}

// assertBlockedKeeps plans blocked w over cur on nodes for passes past the
// drain delay (an instance left in one would be deleted in the next) and
// fails unless every pass keeps every instance, places nothing, and the
// scheduling names reason. It returns the last pass's scheduling.
func assertBlockedKeeps(t *testing.T, nodes []sched.Node, w workload, cur []api.Assignment, reason string) Scheduling {
	t.Helper()
	var st Scheduling
	now := time.Unix(1000, 0)
	reported := readyReports(cur)
	n := 0
	for pass := range 5 {
		plan := PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{w}, Current: cur, Reported: reported,
			Now: now, DrainDelay: 2 * time.Second, NewSuffix: func() string { n++; return fmt.Sprint("s", n) }})
		if len(plan.Put)+len(plan.Leave)+len(plan.Delete) != 0 {
			t.Fatalf("pass %d: put %v, leave %v, delete %v; want every old instance kept and nothing placed",
				pass, ids(plan.Put), ids(plan.Leave), ids(plan.Delete))
		}
		if st = plan.Scheduling[w.Key()]; !strings.Contains(st.Reason, reason) {
			t.Fatalf("pass %d: scheduling %+v; want the reason to name %q", pass, st, reason)
		}
		cur = applyPlan(cur, plan)
		now = now.Add(3 * time.Second)
	}
	return st
}

// TestBlockedServiceUpdateKeepsOldInstances: a Service's new spec that
// cannot be placed (a secret it uses does not exist, resources that do not
// parse) stops none of the old instances, whatever the update strategy
// and whether replicas change with it, and the workload's scheduling says
// why nothing new is placed.
func TestBlockedServiceUpdateKeepsOldInstances(t *testing.T) {
	t.Parallel()
	strategies := []struct{ name, yaml string }{
		{"default maxSurge", ""},
		{"maxSurge 0", "    rolling: {maxSurge: 0}\n"},
		{"Simultaneous", "    type: Simultaneous\n"},
	}
	for i, b := range blockedSpecs {
		for _, s := range strategies {
			for _, replicas := range []int{3, 5, 1} {
				t.Run(fmt.Sprintf("%s/%s/replicas 3 to %d", b.name, s.name, replicas), func(t *testing.T) {
					t.Parallel()
					old := strategyWorkload(t, 1, 3, "v1", "")
					w := blockSpec(t, strategyWorkload(t, 2, replicas, "v2", s.yaml), i)
					st := assertBlockedKeeps(t, oneNode(), w, instances(webTemplate(t, old), "o", 3, 1), b.reason)
					if st.Cause == "" || st.Unplaced != replicas {
						t.Fatalf("scheduling %+v: want a cause and %d unplaced", st, replicas)
					}
				})
			}
		}
	}
}

// TestBlockedSimultaneousDaemonServiceKeepsOldInstances: a DaemonService
// updated Simultaneous, whose new spec cannot be placed, keeps its old
// instance on every node instead of stopping them all.
func TestBlockedSimultaneousDaemonServiceKeepsOldInstances(t *testing.T) {
	t.Parallel()
	for i, b := range blockedSpecs {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const simultaneous = "    type: Simultaneous\n"
			v1 := daemonWorkload(t, 1, "v1", simultaneous)
			w := blockSpec(t, daemonWorkload(t, 2, "v2", simultaneous), i)
			old := []api.Assignment{inst(v1, "a", "x", 1), inst(v1, "b", "y", 1)}
			for j := range old {
				old[j].Type = quadlet.TypeDaemonService
			}
			assertBlockedKeeps(t, []sched.Node{node("a"), node("b")}, w, old, b.reason)
		})
	}
}
