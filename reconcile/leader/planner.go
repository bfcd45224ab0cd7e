package leader

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/netstack/ipam"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

// planner is one PlanAssignments: its own copy of the nodes, which each
// workload's placements are applied to before the next is planned.
type planner struct {
	in     AssignInput
	nodes  []sched.Node
	byName map[string]int
	plan   AssignmentPlan
	// pools hand out the addresses of the nodes' subnets, made on a
	// node's first placement.
	pools map[string]*ipam.Pool
	// replace are, by "ns/name", the back-off records of failed instances
	// the pass decided (replaceFailed), for the rollout records.
	replace map[string]*api.ReplaceBackoff
}

func newPlanner(in AssignInput) *planner {
	p := &planner{
		in: in, nodes: make([]sched.Node, len(in.Nodes)), byName: make(map[string]int, len(in.Nodes)),
		plan: AssignmentPlan{Scheduling: map[string]Scheduling{}, Wake: map[string]time.Time{}, Rollouts: map[string]api.Rollout{}}, pools: map[string]*ipam.Pool{},
		replace: map[string]*api.ReplaceBackoff{},
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
func (p *planner) ready(a api.Assignment) bool {
	i, ok := p.byName[a.Node]
	return ok && p.nodes[i].Ready
}

// reportedReady reports whether a's instance is ready, or is a Job's and
// has succeeded. A Service's or DaemonService's instance that exited 0
// serves nobody: it is not ready, and is replaced (replaceFailed).
func (p *planner) reportedReady(a api.Assignment) bool {
	r, ok := p.in.Reported[a.InstanceID]
	return ok && (r.Ready() || (a.Type == quadlet.TypeJob && r.Phase == api.InstanceSucceeded))
}

// count sets the nodes' instance counts of workload k to those of as.
func (p *planner) count(k string, as []api.Assignment) {
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
// DaemonService), on the nodes in avoid only when no other fits, adds them
// to the plan and to the nodes, and returns the scheduler's result.
func (p *planner) place(w workload, commit string, count int, avoid map[string]bool) sched.Result {
	if err := p.blocked(w); err != nil {
		cause := "missing_secret"
		if w.Spec.RequestErr != nil {
			cause = "invalid_request"
		}
		return sched.Result{Unplaced: count, Reason: err.Error(), Cause: cause}
	}
	req := w.Spec.Request
	req.Key, req.Count, req.Avoid = w.Key(), count, avoid
	res := sched.Place(p.nodes, req, p.in.Rand)
	sched.Apply(p.nodes, req, res.Placements)
	placed := res.Placements[:0]
	for _, at := range res.Placements {
		ip, err := p.address(at.Node)
		if err != nil {
			// The scheduler counted a free address the pool does not
			// have: the instance waits for the next pass.
			res.Unplaced++
			res.Reason, res.Cause = err.Error(), "no_address"
			continue
		}
		placed = append(placed, at)
		p.plan.Put = append(p.plan.Put, newAssignment(at, ip, &req, w, commit, p.template(w, commit), p.in.Now, p.in.NewSuffix()))
	}
	res.Placements = placed
	return res
}

// address returns a free address of node's subnet for a new instance, or
// the invalid address when the node has no subnet (the instance gets
// none).
func (p *planner) address(node string) (netip.Addr, error) {
	i, ok := p.byName[node]
	if !ok || !p.nodes[i].Subnet.IsValid() {
		return netip.Addr{}, nil
	}
	pool := p.pools[node]
	if pool == nil {
		var held, cooling []netip.Addr
		if p.in.HeldIPs != nil {
			held, cooling = p.in.HeldIPs(node)
		} else {
			for _, a := range p.in.Current {
				if a.Node == node && a.IP.IsValid() {
					held = append(held, a.IP)
				}
			}
		}
		var err error
		if pool, err = ipam.NewPool(p.nodes[i].Subnet, held, cooling); err != nil {
			return netip.Addr{}, fmt.Errorf("node %s: %w", node, err)
		}
		p.pools[node] = pool
	}
	ip, err := pool.Allocate()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("node %s: %w", node, err)
	}
	return ip, nil
}

// workload plans one workload from its current assignments cur: its new
// instances, those that stop, and its rollout's progress.
func (p *planner) workload(w workload, commit string, cur []api.Assignment) {
	if w.Meta.Type == quadlet.TypeJob && w.Spec.Job != nil {
		p.job(w, commit, cur)
		return
	}
	k := w.Key()
	tmpl := p.template(w, commit)
	var fresh, stale, leaving []api.Assignment
	for _, a := range cur {
		switch {
		case a.Leaving():
			leaving = append(leaving, a)
		case a.TemplateHash == tmpl:
			fresh = append(fresh, a)
		default:
			stale = append(stale, a)
		}
	}
	p.drain(k, leaving)
	// Oldest first: they are the most likely to be running.
	for _, as := range [][]api.Assignment{fresh, stale} {
		slices.SortStableFunc(as, func(a, b api.Assignment) int { return a.CreatedAt.Compare(b.CreatedAt) })
	}
	if w.Meta.Type == quadlet.TypeDaemonService && w.Spec.NodeByNode &&
		p.daemonRollout(w, commit, slices.Concat(fresh, stale), leaving) {
		p.track(w, p.plan.Scheduling[k], fresh, stale, leaving, tmpl, p.daemonRolloutFailure(w))
		return
	}
	var st Scheduling
	strategy := w.Spec.Strategy
	switch {
	case len(stale) > 0 && p.blocked(w) != nil:
		st = p.keepBlocked(w, commit, fresh, stale)
	case strategy.IsSimultaneous() && (len(stale) > 0 || leavingOld(leaving, tmpl)):
		st = p.simultaneous(w, fresh, stale)
	case w.Meta.Type == quadlet.TypeDaemonService && len(w.Spec.Ports) > 0 && (len(stale) > 0 || leavingOld(leaving, tmpl)):
		st = p.rollDaemonStopFirst(w, commit, fresh, stale, leaving)
	case w.Meta.Type == quadlet.TypeDaemonService:
		var readyFresh int
		st, readyFresh = p.daemon(w, commit, fresh)
		p.rollDaemon(w, st, stale, readyFresh)
	default:
		st = p.rollService(w, commit, fresh, stale, leavingOld(leaving, tmpl))
	}
	p.plan.Scheduling[k] = st
	p.track(w, st, fresh, stale, leaving, tmpl, "")
}

// leavingOld reports whether an instance of another template than tmpl is
// leaving.
func leavingOld(leaving []api.Assignment, tmpl string) bool {
	return slices.ContainsFunc(leaving, func(a api.Assignment) bool { return a.TemplateHash != tmpl })
}

// drain deletes the leaving instances of workload k whose drain delay has
// passed, and asks to be woken when the next one's does.
func (p *planner) drain(k string, leaving []api.Assignment) {
	for _, a := range leaving {
		end := a.LeavingAt.Add(p.in.DrainDelay)
		if !p.in.Now.Before(end) {
			p.plan.Delete = append(p.plan.Delete, a)
			continue
		}
		p.wakeAt(k, end)
	}
}

// wakeAt asks for a pass over workload k at t.
func (p *planner) wakeAt(k string, t time.Time) {
	if w, ok := p.plan.Wake[k]; !ok || t.Before(w) {
		p.plan.Wake[k] = t
	}
}

// stop takes an instance out of service: a ready instance of a Service or
// DaemonService leaves (out of every ready list now, deleted once the drain
// delay has passed) when there is a drain delay; any other is deleted at
// once.
func (p *planner) stop(a api.Assignment) {
	if p.in.DrainDelay <= 0 || a.Type == quadlet.TypeJob || !p.ready(a) || !p.reportedReady(a) {
		p.plan.Delete = append(p.plan.Delete, a)
		return
	}
	a.LeavingAt = p.in.Now
	p.plan.Leave = append(p.plan.Leave, a)
	p.wakeAt(a.Namespace+"/"+a.Workload, a.LeavingAt.Add(p.in.DrainDelay))
}

// serving reports whether a is ready and on a Ready node that is not
// draining: an instance that counts towards the capacity a rollout keeps.
func (p *planner) serving(a api.Assignment) bool {
	return p.ready(a) && !p.in.Draining[a.Node] && p.reportedReady(a)
}

// rollService plans a Service by its rolling update: a ready old
// instance stops only
// while the ready instances stay at or above replicas (so scaling down
// stops surplus old instances first); new instances start while the
// instances stay within replicas + maxSurge. With maxSurge 0 one old
// instance stops at a time before its replacement starts.
func (p *planner) rollService(w workload, commit string, fresh, stale []api.Assignment, oldLeaving bool) Scheduling {
	want := w.Spec.Desired
	surge := w.Spec.Strategy.Surge(want)
	readyFresh, pendingFresh := 0, 0
	for _, a := range fresh {
		if p.serving(a) {
			readyFresh++
		} else {
			pendingFresh++
		}
	}
	var readyOld, idleOld []api.Assignment
	for _, a := range stale {
		if p.serving(a) {
			readyOld = append(readyOld, a)
		} else {
			idleOld = append(idleOld, a)
		}
	}
	n := max(0, min(readyFresh+len(readyOld)-want, len(readyOld)))
	if want == 0 {
		n = len(readyOld)
	}
	if surge == 0 && n == 0 && len(readyOld) > 0 && pendingFresh == 0 && !oldLeaving {
		n = 1 // no room above replicas: replace one at a time
	}
	for _, a := range readyOld[:n] {
		p.stop(a)
	}
	left := len(readyOld) - n
	// Old instances that serve nobody (starting, failing, on a lost node)
	// go once the others hold the capacity. Until then they take room,
	// but one goes whenever they leave no room for a new instance and no
	// new one is on its way, so old instances that never get ready do not
	// stall the rollout.
	if readyFresh+left >= want {
		p.plan.Delete = append(p.plan.Delete, idleOld...)
		idleOld = nil
	}
	room := -1
	if left+len(idleOld) > 0 {
		room = max(0, want+surge-left-len(idleOld))
		if room <= len(fresh) && pendingFresh == 0 && len(idleOld) > 0 {
			p.plan.Delete = append(p.plan.Delete, idleOld[0])
			room++
		}
	}
	st, _ := p.replicas(w, commit, fresh, room)
	return st
}

// simultaneous plans the Simultaneous strategy while old instances remain:
// every old instance stops, and new ones start only once all are gone
// (for a DaemonService too). It keeps the workload's new instances, if any.
func (p *planner) simultaneous(w workload, fresh, stale []api.Assignment) Scheduling {
	for _, a := range stale {
		p.stop(a)
	}
	p.count(w.Key(), fresh)
	desired := w.Spec.Desired
	if w.Meta.Type == quadlet.TypeDaemonService {
		desired = len(stale) + len(fresh)
	}
	return Scheduling{Desired: desired}
}

// keepBlocked plans a workload with old instances whose new spec is
// blocked (resources that do not parse, a missing secret): whatever its
// type, strategy or replicas, it places nothing and keeps every old
// instance, since stopping them would leave the workload without any; its
// scheduling says why. The new instances it has are planned as usual.
func (p *planner) keepBlocked(w workload, commit string, fresh, stale []api.Assignment) Scheduling {
	p.count(w.Key(), stale)
	if w.Meta.Type == quadlet.TypeDaemonService {
		st, _ := p.daemon(w, commit, fresh) // keeps what it has
		st.Desired += len(stale)
		return st
	}
	st, _ := p.replicas(w, commit, fresh, -1)
	return st
}

// rollDaemon replaces a DaemonService's old instances when no node-by-node
// update plans them (daemonRollout declined: no update is under way, or
// its spec is blocked, which keepBlocked plans): all of them, once every
// new instance is ready. Fresh instances are placed by daemon, this
// decides which old ones stop.
func (p *planner) rollDaemon(_ workload, st Scheduling, stale []api.Assignment, readyFresh int) {
	if replaceStale(len(stale), readyFresh, st.Desired) {
		for _, a := range stale {
			p.stop(a)
		}
	}
}

// rollDaemonStopFirst is rollDaemon for a DaemonService that publishes
// host ports, whose instances cannot run two to a node (the second one
// could not bind them): a node with an old or leaving instance gets no new
// one until that has left, and one node at a time stops its old instances,
// once every new instance is ready and nothing else is leaving, so that
// the other nodes keep serving. Old instances on nodes no longer eligible
// stop at once (a blocked spec keeps them all: keepBlocked).
func (p *planner) rollDaemonStopFirst(w workload, commit string, fresh, stale, leaving []api.Assignment) Scheduling {
	k := w.Key()
	eligible := map[string]bool{}
	for _, n := range p.daemonEligible(w, fresh) {
		eligible[n] = true
	}
	var held []api.Assignment // old instances that stay this pass
	for _, a := range stale {
		if eligible[a.Node] {
			held = append(held, a)
		} else {
			p.stop(a)
		}
	}
	// Their nodes count as served: daemon places nothing beside them.
	p.count(k, held)
	p.count(k, leaving)
	st, readyFresh := p.daemon(w, commit, fresh)
	// Every node served by the new template (kept, placed now or waiting
	// for room) must have a ready instance before the next node stops.
	waiting := len(leaving) > 0 || readyFresh < st.Desired || len(held) == 0
	heldOn := map[string]bool{}
	for _, a := range held {
		heldOn[a.Node] = true
	}
	st.Desired += len(heldOn)
	if waiting {
		return st
	}
	next := slices.Min(slices.Collect(maps.Keys(heldOn)))
	for _, a := range held {
		if a.Node == next {
			p.stop(a)
		}
	}
	return st
}

// replicas plans a Service: Desired instances on Ready nodes, those on lost
// or draining nodes replaced, but no more than room instances in
// all (-1: no bound; a rolling update's surge). It returns what placement
// found and how many kept instances are ready.
func (p *planner) replicas(w workload, commit string, fresh []api.Assignment, room int) (Scheduling, int) {
	want := w.Spec.Desired
	var healthy, lost, draining []api.Assignment
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
	// Failed instances go when the back-off allows, their replacements
	// preferably elsewhere; until then they hold their place.
	healthy, avoid := p.replaceFailed(w, healthy)
	// Surplus goes from lost nodes first, then the newest. Instances on
	// draining nodes are not counted: they go by the rule below.
	if surplus := len(healthy) + len(lost) - want; surplus > 0 {
		n := min(surplus, len(lost))
		p.plan.Delete = append(p.plan.Delete, lost[len(lost)-n:]...)
		lost, surplus = lost[:len(lost)-n], surplus-n
		// The newest go; those not ready first, so the ready stay ready.
		slices.SortStableFunc(healthy, func(a, b api.Assignment) int {
			return cmpBool(!p.reportedReady(a), !p.reportedReady(b))
		})
		cut := len(healthy) - surplus
		for _, a := range healthy[cut:] {
			p.stop(a)
		}
		healthy = healthy[:cut]
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
	target := want
	if room >= 0 {
		target = min(want, room)
	}
	if need := target - len(healthy); need > 0 {
		res := p.place(w, commit, need, avoid)
		st.Unplaced, st.Reason, st.Cause = res.Unplaced, res.Reason, res.Cause
		// Each replacement placed lets one lost instance go.
		replaced := min(len(res.Placements), len(lost))
		p.plan.Delete = append(p.plan.Delete, lost[:replaced]...)
	}
	// Instances on a draining node go once the replacements placed are
	// ready and the rest fit nowhere.
	if len(draining) > 0 && ready+st.Unplaced >= want {
		for _, a := range draining {
			p.stop(a)
		}
	}
	return st, ready
}

// daemon plans a DaemonService: one instance on each eligible node. An
// instance stays on a NotReady node and goes from a node that is no longer
// eligible, no longer registered, or departed.
func (p *planner) daemon(w workload, commit string, fresh []api.Assignment) (Scheduling, int) {
	k := w.Key()
	if err := p.blocked(w); err != nil {
		return Scheduling{Desired: len(fresh), Reason: err.Error()}, 0 // keep what it has
	}
	eligible := map[string]bool{}
	// Readiness is ignored for removal: a NotReady node keeps its
	// instance.
	for _, n := range p.daemonEligible(w, fresh) {
		eligible[n] = true
	}
	var kept []api.Assignment
	has := map[string]bool{}
	for _, a := range fresh {
		if !eligible[a.Node] || has[a.Node] {
			p.plan.Delete = append(p.plan.Delete, a)
			continue
		}
		has[a.Node] = true
		kept = append(kept, a)
	}
	// A failed instance is restarted on its node (a new instance there)
	// when the back-off allows.
	kept, _ = p.replaceFailed(w, kept)
	p.count(k, kept)
	ready := 0
	for _, a := range kept {
		if p.reportedReady(a) {
			ready++
		}
	}
	res := p.place(w, commit, 0, nil)
	// Nodes eligible but for the room its instance needs want one too.
	st := Scheduling{Desired: len(kept) + len(res.Placements) + res.Unplaced, Unplaced: res.Unplaced}
	if res.Unplaced > 0 {
		st.Reason, st.Cause = res.Reason, res.Cause
	}
	return st, ready
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
