package leader

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// nodeUsage is what the assignments on one node request, kept by the
// assignments cache's hook so that a pass need not add them up.
type nodeUsage struct {
	cpu, mem int64
	// gpus counts the assignments holding each GPU index.
	gpus map[int]int
}

// add adds (n 1) or removes (n -1) what assignment a requests.
func (u *nodeUsage) add(a *api.Assignment, n int) {
	u.cpu += int64(n) * a.CPUMillis
	u.mem += int64(n) * a.MemoryBytes
	if a.GPU != nil {
		if u.gpus[*a.GPU] += n; u.gpus[*a.GPU] <= 0 {
			delete(u.gpus, *a.GPU)
		}
	}
}

// addUsage adds (n 1) or removes (n -1) assignment a's requests to its
// node's usage. Called with idx.mu held.
func (x *viewIndex) addUsage(a *api.Assignment, n int) {
	u := x.usage[a.Node]
	if u == nil {
		u = &nodeUsage{gpus: map[int]int{}}
		x.usage[a.Node] = u
	}
	u.add(a, n)
	if u.cpu == 0 && u.mem == 0 && len(u.gpus) == 0 {
		delete(x.usage, a.Node)
	}
}

// applyUsage sets each node's Used (CPU and memory) and marks its GPUs in
// use from usage, by node name; a node without usage is left as it is.
func applyUsage(nodes []sched.Node, usage map[string]*nodeUsage) {
	for i := range nodes {
		n := &nodes[i]
		u := usage[n.Name]
		if u == nil {
			continue
		}
		n.Used.CPU, n.Used.Memory = u.cpu, u.mem
		for j := range n.GPUs {
			n.GPUs[j].InUse = u.gpus[n.GPUs[j].Index] > 0
		}
	}
}

// heartbeatChanged is the heartbeats cache's hook: a node that turns Ready
// again makes every workload's placement look again (one that turns
// NotReady changes no key: the node-loss clock wakes placement then).
func (v *view) heartbeatChanged(_ string, old, new *api.NodeHeartbeat) {
	if new == nil {
		reconcile.Poke(v.beatWake)
		return
	}
	now := v.now()
	fresh := func(hb *api.NodeHeartbeat) bool {
		if hb == nil {
			return false
		}
		at := resources.LastHeartbeat(hb.Timestamp, nil)
		return resources.HeartbeatFresh(at, now, v.lossTimeout) || resources.HeartbeatFresh(v.termStart, now, v.lossTimeout)
	}
	if !fresh(old) && fresh(new) {
		v.markAll(factNodes)
		reconcile.Poke(v.beatWake)
	}
}

// nodeResourcesChanged reports whether a node status change matters to the
// scheduler: the node's first or last status, or other allocatable
// resources or GPUs, or another agent (a departed node comes back).
func nodeResourcesChanged(old, new *api.NodeStatus) bool {
	if old == nil || new == nil {
		return old != new
	}
	return old.Resources.Allocatable != new.Resources.Allocatable || !slices.Equal(old.GPUs, new.GPUs) ||
		!old.AgentStartedAt.Equal(new.AgentStartedAt)
}

// schedNodes returns every registered node as the scheduler sees it at
// now, sorted by name, with the usage of every assignment, and the names of
// the draining nodes: SchedNodes over the view.
func (v *view) schedNodes(now time.Time) ([]sched.Node, map[string]bool) {
	regs, _ := v.regs.Snapshot()
	out := make([]sched.Node, 0, len(regs))
	draining := map[string]bool{}
	for _, reg := range regs {
		out = append(out, schedNode(v.node(reg), now, v.lossTimeout))
		if reg.Draining {
			draining[reg.Name] = true
		}
	}
	slices.SortFunc(out, func(a, b sched.Node) int { return strings.Compare(a.Name, b.Name) })
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	applyUsage(out, v.idx.usage)
	v.applySubnets(out)
	return out, draining
}

// detachableNodes returns the names of the registered nodes that may run
// detached (api.NodeRegistration.MayDetach).
func (v *view) detachableNodes() map[string]bool {
	regs, _ := v.regs.Snapshot()
	out := map[string]bool{}
	for _, reg := range regs {
		if reg.MayDetach {
			out[reg.Name] = true
		}
	}
	return out
}

// departedNodes returns the names of the registered nodes that departed
// (resources.Node.Departed).
func (v *view) departedNodes() map[string]bool {
	regs, _ := v.regs.Snapshot()
	out := map[string]bool{}
	for _, reg := range regs {
		if reg.DepartedAt != nil && v.node(reg).Departed() {
			out[reg.Name] = true
		}
	}
	return out
}

// allNodes returns every registered node as the term counts it (node).
func (v *view) allNodes() []resources.Node {
	regs, _ := v.regs.Snapshot()
	out := make([]resources.Node, 0, len(regs))
	for _, reg := range regs {
		out = append(out, v.node(reg))
	}
	return out
}

// node returns a registered node with its status and last heartbeat, as
// the term counts it (no earlier than the term's start).
func (v *view) node(reg api.NodeRegistration) resources.Node {
	n := resources.Node{Registration: reg}
	if st, ok := v.nodes.Get(resources.NodeStatusKey(reg.Name)); ok {
		n.Status = &st
	}
	var beat int64
	if hb, ok := v.beats.Get(resources.NodeHeartbeatKey(reg.Name)); ok {
		beat = hb.Timestamp
	}
	n.Heartbeat = resources.HeartbeatInTerm(resources.LastHeartbeat(beat, n.Status), v.termStart)
	return n
}

// memberAddress reports whether a is the advertised address of a
// registered etcd member.
func (v *view) memberAddress(a netip.Addr) bool {
	regs, _ := v.regs.Snapshot()
	for _, r := range regs {
		if m, err := netip.ParseAddr(r.AdvertiseAddress); err == nil && r.EtcdMember && m.Unmap() == a.Unmap() {
			return true
		}
	}
	return false
}

// nodeReady reports whether node name is registered and Ready at now.
func (v *view) nodeReady(name string, now time.Time) bool {
	reg, ok := v.regs.Get(resources.NodeRegistrationKey(name))
	return ok && v.node(reg).Ready(now, v.lossTimeout)
}

// readyNodes returns the nodes Ready at now, and when the first of them
// turns NotReady (zero when none is Ready).
func (v *view) readyNodes(now time.Time) (map[string]bool, time.Time) {
	regs, _ := v.regs.Snapshot()
	ready := map[string]bool{}
	var next time.Time
	for _, reg := range regs {
		n := v.node(reg)
		if !n.Ready(now, v.lossTimeout) {
			continue
		}
		ready[reg.Name] = true
		if at := nodeLossAt(n.Heartbeat, v.lossTimeout); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return ready, next
}
