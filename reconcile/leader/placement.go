package leader

import (
	"slices"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// planner is one PlanAssignments: its own copy of the nodes, which each
// workload's placements are applied to before the next is planned.
type planner struct {
	in     AssignInput
	nodes  []sched.Node
	byName map[string]int
	plan   AssignmentPlan
}

func newPlanner(in AssignInput) *planner {
	p := &planner{
		in: in, nodes: make([]sched.Node, len(in.Nodes)), byName: make(map[string]int, len(in.Nodes)),
		plan: AssignmentPlan{Scheduling: map[string]Scheduling{}},
	}
	for i, n := range in.Nodes {
		n.GPUs = slices.Clone(n.GPUs)
		n.Used.Instances = nil
		p.nodes[i] = n
		p.byName[n.Name] = i
	}
	return p
}

// ready reports whether the node of a is registered and Ready.
func (p *planner) ready(a resources.Assignment) bool {
	i, ok := p.byName[a.Node]
	return ok && p.nodes[i].Ready
}

// reportedReady reports whether a's instance is ready, or has succeeded.
func (p *planner) reportedReady(a resources.Assignment) bool {
	r, ok := p.in.Reported[a.InstanceID]
	return ok && (r.Ready() || r.Phase == resources.InstanceSucceeded)
}

// count sets the nodes' instance counts of workload k to those of as.
func (p *planner) count(k string, as []resources.Assignment) {
	for _, a := range as {
		if i, ok := p.byName[a.Node]; ok {
			n := &p.nodes[i]
			if n.Used.Instances == nil {
				n.Used.Instances = map[string]int{}
			}
			n.Used.Instances[k]++
		}
	}
}

// place places count new instances of w (every missing one of a
// DaemonService), adds them to the plan and to the nodes, and returns the
// scheduler's result.
func (p *planner) place(w workload, commit string, count int) sched.Result {
	if w.Spec.RequestErr != nil {
		return sched.Result{Unplaced: count, Reason: w.Spec.RequestErr.Error()}
	}
	req := w.Spec.Request
	req.Key, req.Count = w.Key(), count
	res := sched.Place(p.nodes, req, p.in.Rand)
	sched.Apply(p.nodes, req, res.Placements)
	for _, at := range res.Placements {
		p.plan.Put = append(p.plan.Put, newAssignment(at, &req, w, commit, p.in.Now, p.in.NewSuffix()))
	}
	return res
}

// workload plans one workload from its current assignments cur.
func (p *planner) workload(w workload, commit string, cur []resources.Assignment) {
	if w.Meta.Type == quadlet.TypeJob && w.Spec.Job != nil {
		p.job(w, commit, cur)
		return
	}
	tmpl := instanceTemplate(w.Spec.TemplateHash, commit)
	var fresh, stale []resources.Assignment
	for _, a := range cur {
		if a.TemplateHash == tmpl {
			fresh = append(fresh, a)
		} else {
			stale = append(stale, a)
		}
	}
	// Oldest first: they are the most likely to be running.
	slices.SortStableFunc(fresh, func(a, b resources.Assignment) int {
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	var st Scheduling
	var readyFresh int
	if w.Meta.Type == quadlet.TypeDaemonService {
		st, readyFresh = p.daemon(w, commit, fresh)
	} else {
		st, readyFresh = p.replicas(w, commit, fresh)
	}
	p.plan.Scheduling[w.Key()] = st
	if replaceStale(len(stale), readyFresh, st.Desired) {
		p.plan.Delete = append(p.plan.Delete, stale...)
	}
}

// replicas plans a Service: Desired instances on Ready nodes, those on lost
// or draining nodes replaced. It returns what placement found and how many
// kept instances are ready.
func (p *planner) replicas(w workload, commit string, fresh []resources.Assignment) (Scheduling, int) {
	want := w.Spec.Desired
	var healthy, lost, draining []resources.Assignment
	for _, a := range fresh {
		switch {
		case !p.ready(a):
			lost = append(lost, a)
		case p.in.Draining[a.Node]:
			draining = append(draining, a)
		default:
			healthy = append(healthy, a)
		}
	}
	// Surplus goes from lost nodes first, then the newest. Instances on
	// draining nodes are not counted: they go by the rule below.
	if surplus := len(healthy) + len(lost) - want; surplus > 0 {
		for _, list := range []*[]resources.Assignment{&lost, &healthy} {
			n := min(surplus, len(*list))
			cut := len(*list) - n
			p.plan.Delete = append(p.plan.Delete, (*list)[cut:]...)
			*list, surplus = (*list)[:cut], surplus-n
		}
	}
	p.count(w.Key(), healthy)
	p.count(w.Key(), draining)
	ready := 0
	for _, a := range healthy {
		if p.reportedReady(a) {
			ready++
		}
	}
	st := Scheduling{Desired: want}
	if need := want - len(healthy); need > 0 {
		res := p.place(w, commit, need)
		st.Unplaced, st.Reason = res.Unplaced, res.Reason
		// Each replacement placed lets one lost instance go.
		replaced := min(len(res.Placements), len(lost))
		p.plan.Delete = append(p.plan.Delete, lost[:replaced]...)
	}
	// Instances on a draining node go once the replacements placed are
	// ready and the rest fit nowhere.
	if len(draining) > 0 && ready+st.Unplaced >= want {
		p.plan.Delete = append(p.plan.Delete, draining...)
	}
	return st, ready
}

// daemon plans a DaemonService: one instance on each eligible node. An
// instance stays on a NotReady node (spec §4.1.4) and goes from a node that
// is no longer eligible or no longer registered.
func (p *planner) daemon(w workload, commit string, fresh []resources.Assignment) (Scheduling, int) {
	k := w.Key()
	if err := w.Spec.RequestErr; err != nil {
		return Scheduling{Desired: len(fresh), Reason: err.Error()}, 0 // keep what it has
	}
	eligible := map[string]bool{}
	{
		// Readiness is ignored for removal: a NotReady node keeps its
		// instance.
		all := slices.Clone(p.nodes)
		onNode := map[string]int{}
		for _, a := range fresh {
			onNode[a.Node]++
		}
		for i := range all {
			all[i].Ready = true
			all[i].Used.Instances = map[string]int{k: onNode[all[i].Name]}
		}
		req := w.Spec.Request
		req.Key = k
		names, _ := sched.Eligible(all, req)
		for _, n := range names {
			eligible[n] = true
		}
	}
	var kept []resources.Assignment
	has := map[string]bool{}
	for _, a := range fresh {
		if !eligible[a.Node] || has[a.Node] {
			p.plan.Delete = append(p.plan.Delete, a)
			continue
		}
		has[a.Node] = true
		kept = append(kept, a)
	}
	p.count(k, kept)
	ready := 0
	for _, a := range kept {
		if p.reportedReady(a) {
			ready++
		}
	}
	res := p.place(w, commit, 0)
	// Nodes eligible but for the room its instance needs want one too.
	st := Scheduling{Desired: len(kept) + len(res.Placements) + res.Unplaced, Unplaced: res.Unplaced}
	if res.Unplaced > 0 {
		st.Reason = res.Reason
	}
	return st, ready
}
