package leader

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

// DefaultDaemonNodeDeadline is Config.DaemonNodeDeadline's default: how long
// a node of a DaemonService's update may take from its new instance's
// placement to verified before the node fails.
const DefaultDaemonNodeDeadline = 10 * time.Minute

// daemonRolloutInput is what stepDaemonRollout decides from: plain data,
// no etcd.
type daemonRolloutInput struct {
	// Namespace and Workload name the DaemonService.
	Namespace, Workload string
	// Rec is the update's record as stored; nil when there is none.
	Rec *api.DaemonRolloutRecord
	// Target is what the desired spec runs.
	Target daemonTarget
	// Eligible are the nodes the DaemonService belongs on, sorted by name.
	Eligible []string
	// Ready reports the nodes that are Ready: a pending node starts only
	// when it is.
	Ready map[string]bool
	// Current are the DaemonService's assignments, of every template.
	Current []api.Assignment
	// Leaving are the nodes where one of its instances is leaving: its
	// container may still run there.
	Leaving map[string]bool
	// Reported are the agents' reports, by instance ID.
	Reported map[string]api.InstanceStatus
	// Deadline bounds one node's update (DefaultDaemonNodeDeadline).
	Deadline time.Duration
	Now      time.Time
}

// daemonTarget is the instance template a DaemonService's update rolls
// out and how.
type daemonTarget struct {
	Template    string
	Generation  int64
	MaxParallel int
	// Verify says whether the spec has a verify command: a node is
	// verified only once its agent reports VerifyPassed.
	Verify bool
	// StopFirst says the spec publishes host ports: a DaemonService's are
	// published at their own number, so two of its instances can never
	// run on one node. Each node's old instance then leaves before the
	// new one is placed (and the target's before the previous one comes
	// back in a rollback).
	StopFirst bool
}

// daemonRolloutPlan is one step of a DaemonService's update.
type daemonRolloutPlan struct {
	// Active is false when no update is under way or held: the
	// DaemonService is planned as usual (PlanAssignments' rules).
	Active bool
	// Rec is the record as it is after the step; Changed says it differs
	// from the input's and must be written. Drop asks for the stored
	// record to be deleted.
	Rec     *api.DaemonRolloutRecord
	Changed bool
	Drop    bool
	// Place are the nodes that need an instance of the target.
	Place []string
	// Restore are previous instances to put back: copies of
	// Rec.Previous's assignments with Node set, to get new IDs.
	Restore []api.Assignment
	// Delete are the assignments to remove.
	Delete []api.Assignment
}

// stepDaemonRollout decides the next step of a DaemonService's node-by-node
// update from its record and what runs, and is level-triggered: it can be
// called again with the same facts (a new leader does) and never takes a
// step twice. It is pure.
//
// An update starts when the DaemonService has instances of another template
// than the target's: every eligible node becomes pending, remembering what
// it ran. MaxParallel Ready nodes at a time, in order, become updating: an
// instance of the target is placed beside the old one, or with StopFirst
// once the old one has left the node (its drain delay and stop). A node whose new
// instance is ready (and, with a verify command, reported VerifyPassed) is
// verified and its old instances go; when every node is, the update is
// Complete and the record stays as history. A new instance that fails,
// turns unhealthy, exits, fails verification or is not verified within
// Deadline fails its node: no other node starts, and every node touched
// (failed, updating, verified) gets its previous instance back, the target's
// removed once that one is ready (the failed node's old instance never
// stopped, so it goes back at once); with StopFirst the target leaves
// first and the previous instance is restored after. Pending nodes are never touched. The
// update then holds as Failed until the template changes again.
func stepDaemonRollout(in daemonRolloutInput) daemonRolloutPlan {
	byNode := map[string][]api.Assignment{}
	stale := false
	for _, a := range in.Current {
		byNode[a.Node] = append(byNode[a.Node], a)
		stale = stale || a.TemplateHash != in.Target.Template
	}
	for _, as := range byNode {
		slices.SortStableFunc(as, func(a, b api.Assignment) int { return a.CreatedAt.Compare(b.CreatedAt) })
	}
	var plan daemonRolloutPlan
	var rec *api.DaemonRolloutRecord
	if in.Rec != nil && in.Rec.TargetTemplate == in.Target.Template {
		rec = cloneDaemonRollout(in.Rec)
	} else {
		if !stale {
			// Nothing to update: a first deployment, or an update whose
			// template is gone.
			return daemonRolloutPlan{Drop: in.Rec != nil}
		}
		rec = &api.DaemonRolloutRecord{
			DaemonRollout: api.DaemonRollout{
				Namespace: in.Namespace, Workload: in.Workload, Phase: api.RolloutProgressing,
				TargetGeneration: in.Target.Generation, TargetTemplate: in.Target.Template,
				MaxParallel: max(in.Target.MaxParallel, 1), Verify: in.Target.Verify, StartedAt: in.Now,
			},
		}
	}
	if rec.Phase == api.RolloutComplete {
		return daemonRolloutPlan{Rec: rec}
	}
	plan.Active = true
	s := &daemonStep{in: in, rec: rec, byNode: byNode, plan: &plan}
	s.followMembership()
	if rec.Phase == api.RolloutProgressing {
		s.progress()
	}
	if rec.Phase == api.RolloutRollingBack || rec.Phase == api.RolloutFailed {
		s.rollBack()
	}
	// Forget the previous templates no node needs any more.
	used := map[string]bool{}
	for _, n := range rec.Nodes {
		used[n.PreviousTemplate] = true
	}
	maps.DeleteFunc(rec.Previous, func(t string, _ api.Assignment) bool { return !used[t] })
	if in.Rec == nil || !sameJSON(in.Rec, rec) {
		rec.UpdatedAt = in.Now
		plan.Changed = true
	}
	plan.Rec = rec
	return plan
}

// daemonStep is one stepDaemonRollout in progress.
type daemonStep struct {
	in     daemonRolloutInput
	rec    *api.DaemonRolloutRecord
	byNode map[string][]api.Assignment
	plan   *daemonRolloutPlan
}

// setStep moves node n to step; a message, when given, replaces its
// message, which otherwise stays (a failed node's says why, rolled back).
func (s *daemonStep) setStep(n *api.DaemonRolloutNode, step, msg string) {
	if n.Step == step && (msg == "" || n.Message == msg) {
		return
	}
	n.Step, n.UpdatedAt = step, s.in.Now
	if msg != "" {
		n.Message = msg
	}
}

// followMembership removes the instances of nodes no longer eligible and
// their entries, and adds eligible nodes the record lacks as pending.
func (s *daemonStep) followMembership() {
	eligible := map[string]bool{}
	for _, n := range s.in.Eligible {
		eligible[n] = true
	}
	for _, node := range slices.Sorted(maps.Keys(s.byNode)) {
		if !eligible[node] {
			s.plan.Delete = append(s.plan.Delete, s.byNode[node]...)
		}
	}
	s.rec.Nodes = slices.DeleteFunc(s.rec.Nodes, func(n api.DaemonRolloutNode) bool { return !eligible[n.Node] })
	have := map[string]bool{}
	for _, n := range s.rec.Nodes {
		have[n.Node] = true
	}
	for _, node := range s.in.Eligible {
		if have[node] {
			continue
		}
		n := api.DaemonRolloutNode{Node: node, Step: api.NodeStepPending}
		if prev, ok := s.previousOn(node); ok {
			n.PreviousTemplate, n.PreviousGeneration = prev.TemplateHash, prev.Generation
			if s.rec.Previous == nil {
				s.rec.Previous = map[string]api.Assignment{}
			}
			if _, kept := s.rec.Previous[prev.TemplateHash]; !kept {
				s.rec.Previous[prev.TemplateHash] = prev
			}
		}
		s.rec.Nodes = append(s.rec.Nodes, n)
	}
}

// previousOn picks what node runs now other than the target: the oldest
// ready instance, else the oldest.
func (s *daemonStep) previousOn(node string) (api.Assignment, bool) {
	var first *api.Assignment
	for _, a := range s.byNode[node] {
		if a.TemplateHash == s.rec.TargetTemplate {
			continue
		}
		if r, ok := s.in.Reported[a.InstanceID]; ok && r.Ready() {
			return a, true
		}
		if first == nil {
			first = &a
		}
	}
	if first == nil {
		return api.Assignment{}, false
	}
	return *first, true
}

// split returns node's instances of the target and the others.
func (s *daemonStep) split(node string) (target, other []api.Assignment) {
	for _, a := range s.byNode[node] {
		if a.TemplateHash == s.rec.TargetTemplate {
			target = append(target, a)
		} else {
			other = append(other, a)
		}
	}
	return target, other
}

// progress moves an update that has not failed: judges the updating nodes,
// removes the verified nodes' old instances and starts pending nodes while
// fewer than MaxParallel are updating; a failure turns it RollingBack.
func (s *daemonStep) progress() {
	var failures []string
	for i := range s.rec.Nodes {
		n := &s.rec.Nodes[i]
		target, other := s.split(n.Node)
		if n.Step == api.NodeStepPending && len(target) > 0 {
			// Placed by a pass whose record was not written.
			s.setStep(n, api.NodeStepUpdating, "")
			n.StartedAt = s.in.Now
		}
		switch n.Step {
		case api.NodeStepUpdating:
			if len(target) == 0 {
				s.place(n.Node, other)
			} else {
				n.Instance = target[0].InstanceID
				s.judge(n, target[0])
			}
			if n.Step == api.NodeStepUpdating && !n.StartedAt.IsZero() && s.in.Now.Sub(n.StartedAt) > s.in.Deadline {
				s.setStep(n, api.NodeStepFailed, fmt.Sprintf("not verified within %s of its start", s.in.Deadline))
			}
			if n.Step == api.NodeStepFailed {
				failures = append(failures, n.Node+": "+n.Message)
			}
		}
		if n.Step == api.NodeStepVerified {
			s.plan.Delete = append(s.plan.Delete, other...)
			if len(target) > 1 {
				s.plan.Delete = append(s.plan.Delete, target[1:]...)
			}
		}
	}
	if len(failures) > 0 {
		s.rec.Phase = api.RolloutRollingBack
		s.rec.Message = "update stopped: " + failures[0]
		return
	}
	updating, done := 0, true
	for _, n := range s.rec.Nodes {
		updating += b2i(n.Step == api.NodeStepUpdating)
		done = done && n.Step == api.NodeStepVerified
	}
	for i := range s.rec.Nodes {
		n := &s.rec.Nodes[i]
		if updating >= s.rec.MaxParallel {
			break
		}
		if n.Step != api.NodeStepPending || !s.in.Ready[n.Node] {
			continue
		}
		s.setStep(n, api.NodeStepUpdating, "")
		n.StartedAt = s.in.Now
		_, other := s.split(n.Node)
		s.place(n.Node, other)
		updating++
	}
	if done {
		s.rec.Phase = api.RolloutComplete
	}
}

// place asks for an instance of the target on node, which runs other of
// older templates. With StopFirst those leave first, and the target is
// placed on a later step, once none is left or leaving there.
func (s *daemonStep) place(node string, other []api.Assignment) {
	switch {
	case !s.in.Target.StopFirst:
		s.plan.Place = append(s.plan.Place, node)
	case len(other) > 0:
		s.plan.Delete = append(s.plan.Delete, other...)
	case !s.in.Leaving[node]:
		s.plan.Place = append(s.plan.Place, node)
	}
}

// judge moves an updating node by its new instance's report: failed, or
// verified once ready (and verified by its agent when Verify).
func (s *daemonStep) judge(n *api.DaemonRolloutNode, a api.Assignment) {
	r, ok := s.in.Reported[a.InstanceID]
	if !ok {
		return
	}
	switch {
	case r.Phase == api.InstanceFailed:
		s.setStep(n, api.NodeStepFailed, fmt.Sprintf("failed: instance %s failed (exit %d): %s", a.InstanceID, r.ExitCode, r.Message))
	case r.Phase == api.InstanceSucceeded:
		s.setStep(n, api.NodeStepFailed, fmt.Sprintf("failed: instance %s exited", a.InstanceID))
	case r.HealthStatus == api.HealthUnhealthy:
		s.setStep(n, api.NodeStepFailed, fmt.Sprintf("failed: instance %s is unhealthy", a.InstanceID))
	case r.Verification == api.VerifyFailed:
		s.setStep(n, api.NodeStepFailed, fmt.Sprintf("failed: verify command in %s: %s", a.InstanceID, r.VerifyMessage))
	case r.Ready() && (!s.rec.Verify || r.Verification == api.VerifyPassed):
		s.setStep(n, api.NodeStepVerified, "")
	}
}

// rollBack gives every node the update touched its previous instance
// back, and holds the nodes rolled back there; pending nodes are left
// alone. Once none is left to roll back, the update is Failed.
func (s *daemonStep) rollBack() {
	left := false
	for i := range s.rec.Nodes {
		n := &s.rec.Nodes[i]
		switch n.Step {
		case api.NodeStepPending:
			continue
		case api.NodeStepUpdating, api.NodeStepVerified:
			s.setStep(n, api.NodeStepRollingBack, "")
		}
		_, other := s.split(n.Node)
		var prev *api.Assignment
		for j, a := range other {
			if a.TemplateHash == n.PreviousTemplate {
				prev = &other[j]
				break
			}
		}
		keep := ""
		switch {
		case n.PreviousTemplate == "":
			// It ran nothing before.
		case prev == nil:
			if target, _ := s.split(n.Node); s.in.Target.StopFirst && (len(target) > 0 || s.in.Leaving[n.Node]) {
				// The target leaves before the previous instance is back.
				s.plan.Delete = append(s.plan.Delete, target...)
				left = true
				continue
			}
			if a, ok := s.rec.Previous[n.PreviousTemplate]; ok {
				a.Node = n.Node
				s.plan.Restore = append(s.plan.Restore, a)
			}
			left = left || n.Step != api.NodeStepRolledBack
			continue
		default:
			keep = prev.InstanceID
			if r, ok := s.in.Reported[keep]; n.Step != api.NodeStepRolledBack && (!ok || !r.Ready()) {
				left = true
				continue // the target stays until the previous instance is ready
			}
		}
		for _, a := range s.byNode[n.Node] {
			if a.InstanceID != keep {
				s.plan.Delete = append(s.plan.Delete, a)
			}
		}
		s.setStep(n, api.NodeStepRolledBack, "")
	}
	if !left {
		s.rec.Phase = api.RolloutFailed
	}
}

func cloneDaemonRollout(r *api.DaemonRolloutRecord) *api.DaemonRolloutRecord {
	c := *r
	c.Nodes = slices.Clone(r.Nodes)
	c.Previous = maps.Clone(r.Previous)
	return &c
}

// sameJSON reports whether a and b are stored alike: the record as read
// back from etcd has lost what JSON drops (monotonic clocks, empty maps).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// daemonRollout plans DaemonService w node by node while an update is
// under way or held (stepDaemonRollout), from its assignments cur that are
// not leaving, and reports whether it did; when it did not, w is planned
// as usual. It adds the record to write to the plan; instances it removes
// leave first (planner.stop).
func (p *planner) daemonRollout(w workload, commit string, cur, leaving []api.Assignment) bool {
	k := w.Key()
	if p.blocked(w) != nil {
		return false // planned as usual: it keeps what it has
	}
	eligible := p.daemonEligible(w, cur)
	slices.Sort(eligible)
	ready := map[string]bool{}
	for _, n := range p.nodes {
		ready[n.Name] = n.Ready
	}
	tmpl := p.template(w, commit)
	leavingOn := map[string]bool{}
	for _, a := range leaving {
		leavingOn[a.Node] = true
	}
	step := stepDaemonRollout(daemonRolloutInput{
		Namespace: w.Meta.Namespace, Workload: w.Meta.Name, Rec: p.in.DaemonRollouts[k],
		Target: daemonTarget{Template: tmpl, Generation: w.Meta.Generation, MaxParallel: w.Spec.MaxParallel,
			Verify: w.Spec.Verify, StopFirst: len(w.Spec.Ports) > 0},
		Eligible: eligible, Ready: ready, Current: cur, Leaving: leavingOn, Reported: p.in.Reported,
		Deadline: cmp.Or(p.in.DaemonNodeDeadline, DefaultDaemonNodeDeadline), Now: p.in.Now,
	})
	if step.Drop {
		p.plan.DropDaemonRollouts = append(p.plan.DropDaemonRollouts, k)
	}
	if step.Changed {
		p.plan.DaemonRollouts = append(p.plan.DaemonRollouts, *step.Rec)
	}
	if !step.Active {
		return false
	}
	req := w.Spec.Request
	req.Key = k
	prevOf := map[string]api.Assignment{}
	for _, a := range cur {
		prevOf[a.Node] = a
	}
	var placed []sched.Placement
	for _, node := range step.Place {
		at := sched.Placement{Node: node, GPU: -1}
		if old, ok := prevOf[node]; ok && old.GPU != nil {
			at.GPU = *old.GPU // the node's device, shared while both run
		}
		ip, err := p.address(node)
		if err != nil {
			// No free address: the record says updating, nothing runs
			// there yet, and the next pass places it again.
			continue
		}
		placed = append(placed, at)
		p.plan.Put = append(p.plan.Put, newAssignment(at, ip, &req, w, commit, p.template(w, commit), p.in.Now, p.in.NewSuffix()))
	}
	for _, a := range step.Restore {
		ip, err := p.address(a.Node)
		if err != nil {
			continue // as above: restored on a later pass
		}
		a.InstanceID = InstanceID(a.Workload, a.TemplateHash, p.in.NewSuffix())
		a.CreatedAt, a.IP, a.LeavingAt = p.in.Now, ip, time.Time{}
		if old, ok := prevOf[a.Node]; ok {
			a.GPU = old.GPU
		} else {
			a.GPU = nil
		}
		placed = append(placed, sched.Placement{Node: a.Node, GPU: -1})
		p.plan.Put = append(p.plan.Put, a)
	}
	sched.Apply(p.nodes, req, placed)
	p.count(k, cur)
	for _, a := range step.Delete {
		p.stop(a) // out of service first, with a drain delay
	}
	p.plan.Scheduling[k] = Scheduling{Desired: len(eligible)}
	return true
}

// daemonEligible returns the nodes DaemonService w belongs on, Ready or
// not, but not departed: a node that runs one of cur needs no room for it.
func (p *planner) daemonEligible(w workload, cur []api.Assignment) []string {
	all := slices.DeleteFunc(slices.Clone(p.nodes), func(n sched.Node) bool { return p.in.Departed[n.Name] })
	onNode := map[string]int{}
	for _, a := range cur {
		onNode[a.Node]++
	}
	for i := range all {
		all[i].Ready = true
		all[i].Used.Instances = map[string]int{w.Key(): onNode[all[i].Name]}
	}
	req := w.Spec.Request
	req.Key = w.Key()
	names, _ := sched.Eligible(all, req)
	return names
}

// daemonRolloutFailure is why w's node-by-node update of its current
// generation failed, as its record (the one this pass writes, else the
// stored one) says; "" while it has not.
func (p *planner) daemonRolloutFailure(w workload) string {
	k := w.Key()
	rec, ok := p.in.DaemonRollouts[k]
	for i, r := range p.plan.DaemonRollouts {
		if r.Namespace+"/"+r.Workload == k {
			rec, ok = &p.plan.DaemonRollouts[i], true
		}
	}
	if !ok || rec == nil || rec.Phase != api.RolloutFailed || rec.TargetGeneration != w.Meta.Generation {
		return ""
	}
	return cmp.Or(rec.Message, "the node-by-node update failed")
}
