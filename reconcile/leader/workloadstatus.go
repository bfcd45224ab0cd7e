package leader

import (
	"fmt"
	"slices"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// StatusInput is what DeriveWorkloadStatus needs to know about one workload.
type StatusInput struct {
	Meta resources.WorkloadMeta
	// TemplateHash is the workload's TemplateHash: assignments with
	// another are old instances.
	TemplateHash string
	// Desired is the instance count the workload asks for.
	Desired int
	// Assigned are the workload's assignments, on every node.
	Assigned []resources.Assignment
	// Reported are the agents' reports of those instances, by instance ID;
	// an instance not reported yet is absent.
	Reported map[string]resources.InstanceStatus
	// Prev is the status stored now.
	Prev resources.WorkloadStatus
	// SourceCommit is, for a workload built from Git, the app commit its
	// current instances are built from. Default "".
	SourceCommit string
}

// ownedCondition reports whether DeriveWorkloadStatus writes condition c:
// Ready, Reconciling with reason Progressing and Stalled with reason
// InstanceFailed. Every other condition (Stalled with reason InvalidQuadlet
// from gitsync, BuildFailed from the agents) belongs to another writer and is
// kept as it is. It is pure.
func ownedCondition(c resources.Condition) bool {
	switch c.Type {
	case "Ready":
		return true
	case "Reconciling":
		return c.Reason == resources.PhaseProgressing
	case "Stalled":
		return c.Reason == reasonInstanceFailed
	}
	return false
}

const reasonInstanceFailed = "InstanceFailed"

// DeriveWorkloadStatus computes a workload's status from its assignments and
// what the agents report. It is pure. UpdatedAt and each condition's
// LastTransitionTime move to now only when what they describe changes, so a
// caller can skip the write when the result equals Prev.
//
// Phases: Pending while no instance runs and none failed; Progressing while
// instances start or a new spec replaces old instances; Ready when every
// desired instance of the current spec is ready (a Job: when an instance
// succeeded); Degraded when some, but not all, are ready after having been
// Ready, or when an instance failed but others are ready; Failed when an
// instance failed and none is ready.
func DeriveWorkloadStatus(in StatusInput, now time.Time) resources.WorkloadStatus {
	var ready, failed, succeeded, running, fresh, stale int
	lastError := ""
	for _, a := range in.Assigned {
		if a.TemplateHash == in.TemplateHash {
			fresh++
		} else {
			stale++
		}
		r, ok := in.Reported[a.InstanceID]
		if !ok {
			continue
		}
		switch r.Phase {
		case resources.InstanceFailed:
			failed++
			if lastError == "" {
				lastError = instanceError(r)
			}
		case resources.InstanceSucceeded:
			succeeded++
		case resources.InstanceRunning:
			running++
		}
		if r.Message != "" && lastError == "" && r.Phase != resources.InstanceRunning {
			lastError = r.Message
		}
		if a.TemplateHash == in.TemplateHash && r.Ready() {
			ready++
		}
	}
	st := resources.WorkloadStatus{
		ObservedGeneration: in.Prev.ObservedGeneration, Desired: in.Desired, Ready: ready, LastError: lastError,
	}
	if stale == 0 && fresh == in.Desired {
		st.ObservedGeneration = in.Meta.Generation
	}
	isJob := in.Meta.Type == quadlet.TypeJob
	prevUp := in.Prev.Phase == resources.PhaseReady || in.Prev.Phase == resources.PhaseDegraded
	switch {
	case isJob && succeeded > 0:
		st.Phase = resources.PhaseReady
	case failed > 0 && ready == 0 && running == 0:
		st.Phase = resources.PhaseFailed
	case ready >= in.Desired && stale == 0 && fresh == in.Desired:
		st.Phase = resources.PhaseReady
	case failed > 0 || (prevUp && ready < in.Desired && stale == 0):
		st.Phase = resources.PhaseDegraded
	case ready == 0 && running == 0 && stale == 0:
		st.Phase = resources.PhasePending
	default:
		st.Phase = resources.PhaseProgressing
	}
	cond := resources.Condition{
		Type: "Ready", Status: resources.ConditionFalse, Reason: st.Phase,
		Message: fmt.Sprintf("%d/%d instances ready", ready, in.Desired), LastTransitionTime: now,
	}
	if st.Phase == resources.PhaseReady {
		cond.Status = resources.ConditionTrue
	}
	if isJob && succeeded > 0 {
		cond.Reason, cond.Message = "Succeeded", "the job's instance exited 0"
	}
	conds := []resources.Condition{cond}
	if st.Phase == resources.PhaseProgressing {
		conds = append(conds, resources.Condition{Type: "Reconciling", Status: resources.ConditionTrue, Reason: "Progressing",
			Message:            fmt.Sprintf("%d of %d instances of generation %d assigned, %d old instances left", fresh, in.Desired, in.Meta.Generation, stale),
			LastTransitionTime: now})
	}
	if st.Phase == resources.PhaseFailed {
		conds = append(conds, resources.Condition{Type: "Stalled", Status: resources.ConditionTrue, Reason: reasonInstanceFailed,
			Message: lastError, LastTransitionTime: now})
	}
	for i := range conds {
		for _, p := range in.Prev.Conditions {
			if p.Type == conds[i].Type && p.Status == conds[i].Status && p.Reason == conds[i].Reason {
				conds[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	// Other writers' conditions stay as they are, before this function's
	// Reconciling and Stalled, so that SetWorkloadCondition (which finds a
	// condition by type) finds theirs first.
	var foreign []resources.Condition
	for _, p := range in.Prev.Conditions {
		if !ownedCondition(p) {
			foreign = append(foreign, p)
		}
	}
	st.Conditions = append(append(conds[:1:1], foreign...), conds[1:]...)
	st.SourceCommit = in.SourceCommit
	st.UpdatedAt = in.Prev.UpdatedAt
	if !statusEqual(st, in.Prev) {
		st.UpdatedAt = now
	}
	return st
}

func instanceError(r resources.InstanceStatus) string {
	if r.Message != "" {
		return fmt.Sprintf("instance %s: %s", r.InstanceID, r.Message)
	}
	return fmt.Sprintf("instance %s failed: exit code %d after %d restarts", r.InstanceID, r.ExitCode, r.Restarts)
}

// statusEqual compares two statuses, ignoring UpdatedAt.
func statusEqual(a, b resources.WorkloadStatus) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	return a.ObservedGeneration == b.ObservedGeneration && a.Phase == b.Phase && a.Desired == b.Desired &&
		a.Ready == b.Ready && a.LastError == b.LastError && a.SourceCommit == b.SourceCommit &&
		slices.EqualFunc(a.Conditions, b.Conditions, func(x, y resources.Condition) bool {
			return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message &&
				x.LastTransitionTime.Equal(y.LastTransitionTime)
		})
}
