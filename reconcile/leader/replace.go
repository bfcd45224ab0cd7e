package leader

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
)

// The back-off between replacements of a workload's failed instances
// (ReplacePolicy's defaults).
const (
	// DefaultReplaceBase is the wait after the first replacement before
	// the next; it doubles with every attempt.
	DefaultReplaceBase = 2 * time.Second
	// DefaultReplaceCap bounds the wait.
	DefaultReplaceCap = 5 * time.Minute
	// DefaultReplaceReset is how long a workload goes without a failed
	// instance before its attempts count from zero again.
	DefaultReplaceReset = 10 * time.Minute
)

// ReplacePolicy is the back-off between replacements of a workload's
// failed instances; a zero field takes its default.
type ReplacePolicy struct {
	Base, Cap, Reset time.Duration
}

// delay is the wait after the attempt-th replacement in a row before the
// next: Base doubled attempt-1 times, at most Cap.
func (p ReplacePolicy) delay(attempt int) time.Duration {
	base, limit := cmp.Or(p.Base, DefaultReplaceBase), cmp.Or(p.Cap, DefaultReplaceCap)
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

func (p ReplacePolicy) reset() time.Duration { return cmp.Or(p.Reset, DefaultReplaceReset) }

// failedInstance is an instance of a Service or DaemonService that ended
// for good: its agent reported it Failed (its restart policy gave up on it)
// or Succeeded (it exited 0 under restart condition Never or MaxCount,
// which do not restart a clean exit). Either way it serves nobody and is
// replaced.
type failedInstance struct {
	ID, Reason string
}

// stepReplace decides which of a workload's failed instances are replaced
// now, from the back-off record prev (nil: none) and the instances failed
// now. It is pure.
//
// The first failure is replaced at once; each replacement sets the earliest
// time of the next (ReplacePolicy.delay of its attempt count), and failed
// instances wait until then (wake). Instances that prev's attempt replaced
// already (its Instances) are replaced without counting: a pass that wrote
// the record but not the assignments ended before its time. A workload
// without a failed instance for the reset period since the last attempt
// loses its record (next nil); until then wake is when that happens.
func stepReplace(prev *api.ReplaceBackoff, failed []failedInstance, now time.Time, pol ReplacePolicy) (next *api.ReplaceBackoff, replace []string, wake time.Time) {
	next = prev
	stable := prev != nil && !now.Before(prev.LastAt.Add(pol.reset()))
	if len(failed) == 0 {
		switch {
		case stable:
			next = nil
		case prev != nil:
			wake = prev.LastAt.Add(pol.reset())
		}
		return next, nil, wake
	}
	var uncounted []failedInstance
	for _, f := range failed {
		if prev != nil && slices.Contains(prev.Instances, f.ID) {
			replace = append(replace, f.ID)
		} else {
			uncounted = append(uncounted, f)
		}
	}
	if len(uncounted) == 0 {
		return next, replace, wake
	}
	attempts := 0
	if prev != nil && !stable {
		if now.Before(prev.NextAt) {
			return next, replace, prev.NextAt
		}
		attempts = prev.Attempts
	}
	attempts++
	next = &api.ReplaceBackoff{Attempts: attempts, LastAt: now, NextAt: now.Add(pol.delay(attempts)), Reason: uncounted[0].Reason}
	for _, f := range uncounted {
		next.Instances = append(next.Instances, f.ID)
		replace = append(replace, f.ID)
	}
	return next, replace, wake
}

// replaceEqual compares two back-off records.
func replaceEqual(a, b *api.ReplaceBackoff) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Attempts == b.Attempts && a.LastAt.Equal(b.LastAt) && a.NextAt.Equal(b.NextAt) &&
		slices.Equal(a.Instances, b.Instances) && a.Reason == b.Reason
}

// instanceExited is the reason an instance of a Service or DaemonService
// that exited 0 for good is replaced.
func instanceExited(r api.InstanceStatus) string {
	return fmt.Sprintf("instance %s exited with code 0 and its restart policy does not restart it", r.InstanceID)
}

// replaceFailed takes the failed instances of workload w among kept (on
// Ready nodes, of the current template), those that exited 0 included, out of kept when the back-off
// allows: they are deleted, and the nodes they ran on returned to be
// avoided by their replacements. The back-off record it leads to is kept
// for the rollout record (track). A DaemonService's replacement is placed
// on the same node, since it is the node's instance.
func (p *planner) replaceFailed(w workload, kept []api.Assignment) ([]api.Assignment, map[string]bool) {
	k := w.Key()
	var prev *api.ReplaceBackoff
	if ro, ok := p.in.Rollouts[k]; ok && ro.Generation == w.Meta.Generation {
		prev = ro.Replace
	}
	var failed []failedInstance
	for _, a := range kept {
		r, ok := p.in.Reported[a.InstanceID]
		if !ok || !p.ready(a) {
			continue
		}
		switch {
		case r.Phase == api.InstanceFailed && !buildFailed(a, r):
			failed = append(failed, failedInstance{ID: a.InstanceID, Reason: instanceError(r)})
		case r.Phase == api.InstanceSucceeded:
			failed = append(failed, failedInstance{ID: a.InstanceID, Reason: instanceExited(r)})
		}
	}
	next, replace, wake := stepReplace(prev, failed, p.in.Now, p.in.Replace)
	p.replace[k] = next
	if !wake.IsZero() {
		p.wakeAt(k, wake)
	}
	if len(replace) == 0 {
		return kept, nil
	}
	avoid := map[string]bool{}
	out := kept[:0:0]
	for _, a := range kept {
		if slices.Contains(replace, a.InstanceID) {
			p.plan.Delete = append(p.plan.Delete, a)
			p.plan.Replaced = append(p.plan.Replaced, a)
			avoid[a.Node] = true
			continue
		}
		out = append(out, a)
	}
	return out, avoid
}

// buildFailed tells an instance built from Git that failed before it had a
// container: its build failed, and the same commit fails the same way on any
// node, so it waits for the next commit (the workload shows BuildFailed)
// instead of being replaced by a rebuild of the same one.
func buildFailed(a api.Assignment, r api.InstanceStatus) bool {
	return a.Build != nil && r.ContainerID == ""
}
