package leader

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// keptOutcomes bounds the settled outcomes a rollout record keeps: more than
// the archive keeps (resources.DefaultArchiveKeep).
const keptOutcomes = 50

// rolloutFacts are what one step of a workload's rollout is decided from.
type rolloutFacts struct {
	// Meta is the workload's desired-state metadata: its generation, and
	// whether a rollback wrote it.
	Meta api.WorkloadMeta
	// Strategy is the workload's update strategy (nil: the defaults).
	Strategy *quadlet.UpdateStrategy
	// Counts are its instances now; Nodes per node for a DaemonService.
	Counts api.RolloutCounts
	Nodes  []api.RolloutNode
	// Cause says why new instances are not ready, for a failure's message.
	Cause string
	// Failed, when set, is why the rollout has failed already, before its
	// deadline: a DaemonService's node-by-node update stopped at a node
	// that failed (and put the nodes it touched back).
	Failed string
	// NodeWait is true when every new instance not ready waits only to
	// retry a step its node failed (InstanceStatus.NodeRetry): the
	// rollout waits on its nodes, not on its instances.
	NodeWait bool
	Now      time.Time
}

// stepRollout advances a workload's rollout record prev by one planning
// pass. It is pure. A new generation starts a rollout. A rollout makes
// progress when more new instances are ready than ever before, or fewer old
// ones are left; it succeeds once Desired new instances are ready and no old
// one is left; it fails when the progress deadline passes without progress.
// A failed generation is rolled back (rollbackTo > 0: apply that
// generation's files again) when autoRollback is on and an earlier
// generation succeeded; the step asks again on every pass while the failed
// generation is current. While its new instances wait only on their nodes'
// retries (f.NodeWait) the deadline does not run out: once half of it is
// gone, ProgressAt moves to now, so the instances have at least half the
// deadline left when their nodes recover. wake is when the deadline ends
// (or, while waiting on nodes, when it is to be moved), zero when the
// rollout is over.
func stepRollout(prev api.Rollout, f rolloutFacts) (next api.Rollout, rollbackTo int64, wake time.Time) {
	g := f.Meta.Generation
	next = prev
	next.Outcomes = maps.Clone(prev.Outcomes)
	if prev.Generation != g {
		next = api.Rollout{Generation: g, StartedAt: f.Now, ProgressAt: f.Now, MostNewReady: f.Counts.NewReady,
			FewestOld: f.Counts.Old + f.Counts.Leaving, Outcomes: pruneOutcomes(prev.Outcomes, g), Failure: prev.Failure}
		if rb := f.Meta.Rollback; rb == nil || !rb.Auto || prev.Failure == nil || rb.From != prev.Failure.Generation {
			next.Failure = nil // a later rollout than the failure's rollback
		}
	}
	next.DeadlineSeconds = f.Strategy.ProgressDeadline()
	next.Counts, next.Nodes = f.Counts, f.Nodes
	if out := next.Outcomes[g]; out != "" {
		if fl := next.Failure; out == api.OutcomeFailed && fl != nil && fl.Generation == g {
			rollbackTo = fl.RollbackTo
		}
		return next, rollbackTo, time.Time{}
	}
	c := f.Counts
	if old := c.Old + c.Leaving; c.NewReady > next.MostNewReady || old < next.FewestOld {
		next.ProgressAt = f.Now
		next.MostNewReady, next.FewestOld = max(next.MostNewReady, c.NewReady), min(next.FewestOld, old)
	}
	if c.Old == 0 && c.Leaving == 0 && c.NewReady >= c.Desired && c.New == c.Desired {
		next.Outcomes = setOutcome(next.Outcomes, g, api.OutcomeSucceeded)
		next.CompletedAt = f.Now
		return next, 0, time.Time{}
	}
	window := time.Duration(next.DeadlineSeconds) * time.Second
	if f.NodeWait && f.Failed == "" {
		if !f.Now.Before(next.ProgressAt.Add(window / 2)) {
			next.ProgressAt = f.Now
		}
		return next, 0, next.ProgressAt.Add(window / 2)
	}
	deadline := next.ProgressAt.Add(window)
	if f.Now.Before(deadline) && f.Failed == "" {
		return next, 0, deadline
	}
	next.Outcomes = setOutcome(next.Outcomes, g, api.OutcomeFailed)
	next.CompletedAt = f.Now
	var msg string
	if f.Failed != "" {
		msg = fmt.Sprintf("generation %d failed: %s", g, f.Failed)
	} else {
		msg = fmt.Sprintf("generation %d made no progress for %ds: %d of %d new instances ready, %d old instances left",
			g, next.DeadlineSeconds, c.NewReady, c.Desired, c.Old+c.Leaving)
		if f.Cause != "" {
			msg += "; " + f.Cause
		}
	}
	fl := &api.RolloutFailure{Generation: g, At: f.Now, Reason: ReasonProgressDeadlineExceeded}
	if f.Failed != "" {
		fl.Reason = ReasonNodeUpdateFailed
	}
	switch to := lastSucceeded(next.Outcomes, g); {
	case !f.Strategy.AutoRollbackEnabled():
		msg += "; autoRollback is off: the rollout stays as it stopped"
	case to == 0:
		msg += "; no earlier generation rolled out successfully: nothing to roll back to"
	default:
		fl.RollbackTo, rollbackTo = to, to
		msg += fmt.Sprintf("; rolling back to generation %d's files", to)
	}
	fl.Message = msg
	next.Failure = fl
	return next, rollbackTo, time.Time{}
}

// lastSucceeded is the newest generation before g whose rollout succeeded,
// 0 when none did.
func lastSucceeded(outcomes map[int64]string, g int64) int64 {
	var best int64
	for gen, out := range outcomes {
		if gen < g && out == api.OutcomeSucceeded && gen > best {
			best = gen
		}
	}
	return best
}

func setOutcome(m map[int64]string, g int64, out string) map[int64]string {
	if m == nil {
		m = map[int64]string{}
	}
	m[g] = out
	return m
}

// pruneOutcomes keeps the outcomes of the keptOutcomes generations before g.
func pruneOutcomes(m map[int64]string, g int64) map[int64]string {
	out := maps.Clone(m)
	maps.DeleteFunc(out, func(gen int64, _ string) bool { return gen <= g-keptOutcomes })
	return out
}

// track counts a workload's instances as the pass found them, steps its
// rollout, and adds a changed record, a rollback and a wake-up to the plan.
func (p *planner) track(w workload, st Scheduling, fresh, stale, leaving []api.Assignment, tmpl, failed string) {
	k := w.Key()
	c := api.RolloutCounts{Desired: st.Desired, New: len(fresh), Old: len(stale), Leaving: len(leaving)}
	nodes := map[string]*api.RolloutNode{}
	node := func(n string) *api.RolloutNode {
		if nodes[n] == nil {
			nodes[n] = &api.RolloutNode{Node: n}
		}
		return nodes[n]
	}
	cause := ""
	notReady, nodeRetries := 0, 0
	for _, a := range fresh {
		node(a.Node).New++
		if p.serving(a) {
			c.NewReady++
			node(a.Node).NewReady++
			continue
		}
		notReady++
		if r, ok := p.in.Reported[a.InstanceID]; ok && r.NodeRetry && p.ready(a) {
			nodeRetries++
		}
		if cause == "" {
			cause = p.notReadyCause(a)
		}
	}
	for _, a := range stale {
		node(a.Node).Old++
		if p.serving(a) {
			c.OldReady++
		}
	}
	for _, a := range leaving {
		if a.TemplateHash == tmpl {
			c.Leaving-- // a new instance leaving (scaled down) is not an old one
		}
	}
	if cause == "" && st.Unplaced > 0 {
		cause = fmt.Sprintf("%d new instances fit on no node: %s", st.Unplaced, st.Reason)
	}
	f := rolloutFacts{Meta: w.Meta, Strategy: w.Spec.Strategy, Counts: c, Cause: cause, Failed: failed, Now: p.in.Now,
		NodeWait: notReady > 0 && nodeRetries == notReady && st.Unplaced == 0}
	if w.Meta.Type == quadlet.TypeDaemonService {
		for _, n := range slices.Sorted(maps.Keys(nodes)) {
			f.Nodes = append(f.Nodes, *nodes[n])
		}
	}
	prev := p.in.Rollouts[k]
	next, to, wake := stepRollout(prev, f)
	if r, ok := p.replace[k]; ok {
		next.Replace = r
	}
	if !rolloutEqual(prev, next) {
		p.plan.Rollouts[k] = next
	}
	if to > 0 {
		p.plan.Rollbacks = append(p.plan.Rollbacks, Rollback{Key: k, From: w.Meta.Generation, To: to})
	}
	if !wake.IsZero() {
		p.wakeAt(k, wake)
	}
}

// notReadyCause says why instance a is not ready, from its agent's report.
func (p *planner) notReadyCause(a api.Assignment) string {
	r, ok := p.in.Reported[a.InstanceID]
	switch {
	case !p.ready(a):
		return fmt.Sprintf("instance %s: node %s is not Ready", a.InstanceID, a.Node)
	case !ok:
		return fmt.Sprintf("instance %s on node %s: not reported yet", a.InstanceID, a.Node)
	case r.Message != "":
		return fmt.Sprintf("instance %s on node %s: %s: %s", a.InstanceID, a.Node, r.Phase, r.Message)
	case r.Phase == api.InstanceRunning && r.HealthStatus == api.HealthUnhealthy:
		return fmt.Sprintf("instance %s on node %s: its health check fails", a.InstanceID, a.Node)
	case r.Phase == api.InstanceRunning:
		return fmt.Sprintf("instance %s on node %s: health check %s", a.InstanceID, a.Node, r.HealthStatus)
	}
	return fmt.Sprintf("instance %s on node %s: %s", a.InstanceID, a.Node, r.Phase)
}

// rolloutEqual compares two rollout records.
func rolloutEqual(a, b api.Rollout) bool {
	return a.Generation == b.Generation && a.StartedAt.Equal(b.StartedAt) && a.ProgressAt.Equal(b.ProgressAt) &&
		a.CompletedAt.Equal(b.CompletedAt) && a.MostNewReady == b.MostNewReady && a.FewestOld == b.FewestOld &&
		a.DeadlineSeconds == b.DeadlineSeconds && a.Counts == b.Counts && slices.Equal(a.Nodes, b.Nodes) &&
		maps.Equal(a.Outcomes, b.Outcomes) && failureEqual(a.Failure, b.Failure) &&
		replaceEqual(a.Replace, b.Replace)
}

func failureEqual(a, b *api.RolloutFailure) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Generation == b.Generation && a.At.Equal(b.At) && a.Message == b.Message && a.RollbackTo == b.RollbackTo
}
