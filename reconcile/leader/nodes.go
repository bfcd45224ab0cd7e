package leader

import (
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// SchedNodes returns the scheduler's view of the registered nodes at now,
// in their order, with what the assignments on them request (Used, without
// instance counts: PlanAssignments counts those per workload), and the
// names of the draining nodes. A node is Ready while its heartbeat is no
// older than lossTimeout (resources.Node.Ready), and Cordoned when
// unschedulable or draining. It is pure.
func SchedNodes(nodes []resources.Node, assigned []api.Assignment, now time.Time, lossTimeout time.Duration) ([]sched.Node, map[string]bool) {
	out := make([]sched.Node, len(nodes))
	draining := map[string]bool{}
	for i, n := range nodes {
		out[i] = schedNode(n, now, lossTimeout)
		if n.Registration.Draining {
			draining[n.Registration.Name] = true
		}
	}
	applyAssigned(out, assigned)
	return out, draining
}

// applyAssigned sets the nodes' Used and GPUs in use from what the
// assignments request (applyUsage); assignments of other nodes are
// ignored.
func applyAssigned(nodes []sched.Node, assigned []api.Assignment) {
	usage := map[string]*nodeUsage{}
	for i := range assigned {
		a := &assigned[i]
		if usage[a.Node] == nil {
			usage[a.Node] = &nodeUsage{gpus: map[int]int{}}
		}
		usage[a.Node].add(a, 1)
	}
	applyUsage(nodes, usage)
}

// schedNode converts a node's registration and last status; its Used is
// empty. Allocatable quantities that do not parse count as none.
func schedNode(n resources.Node, now time.Time, lossTimeout time.Duration) sched.Node {
	reg := n.Registration
	sn := sched.Node{
		Name: reg.Name, Labels: reg.Labels, Ready: n.Ready(now, lossTimeout),
		Cordoned: reg.Unschedulable || reg.Draining,
	}
	for _, t := range reg.Taints {
		sn.Taints = append(sn.Taints, sched.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
	}
	if st := n.Status; st != nil {
		sn.CPU, _ = quadlet.ParseCPU(st.Resources.Allocatable.CPU)
		sn.Memory, _ = quadlet.ParseMemory(st.Resources.Allocatable.Memory)
		for _, g := range st.GPUs {
			sn.GPUs = append(sn.GPUs, sched.GPU{Index: g.Index, Driver: g.Driver, VRAMMiB: g.VRAMMiB})
		}
	}
	return sn
}

// nodeLossAt returns when the Ready node whose last heartbeat was at hb
// becomes NotReady: just after hb plus lossTimeout (resources.HeartbeatFresh).
func nodeLossAt(hb time.Time, lossTimeout time.Duration) time.Time {
	return hb.Add(lossTimeout + time.Millisecond)
}
