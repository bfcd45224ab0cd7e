package leader

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// Condition types and reasons of a workload's status. The status loop
// derives every one of them; nobody else writes a workload's status.
const (
	ConditionReady          = "Ready"
	ConditionReconciling    = "Reconciling"
	ConditionStalled        = "Stalled"
	ConditionBuildFailed    = "BuildFailed"
	ConditionSourceResolved = "SourceResolved"
	ConditionScheduled      = "Scheduled"
	// ConditionRolloutFailed is true while the last rollout that failed
	// (or its rollback) is the workload's latest.
	ConditionRolloutFailed = "RolloutFailed"
	// ConditionIngressConflict is true while another workload holds a
	// host and path of this workload's spec.ingress: that rule is not
	// routed.
	ConditionIngressConflict = "IngressConflict"
	// ReasonHostPathInUse: another workload held the host and path first.
	ReasonHostPathInUse = "HostPathInUse"

	ReasonProgressing    = "Progressing"
	ReasonInstanceFailed = "InstanceFailed"
	ReasonInvalidQuadlet = "InvalidQuadlet"
	ReasonResolveFailed  = "ResolveFailed"
	ReasonSucceeded      = "Succeeded"
	ReasonUnschedulable  = "Unschedulable"
	// ReasonInstanceReplaced: a failed instance was replaced (an event).
	ReasonInstanceReplaced = "InstanceReplaced"
	// ReasonBackOff: a failed instance waits out the back-off before it
	// is replaced.
	ReasonBackOff = "BackOff"
	// ReasonPlacementFailed: the last placement pass over the workload
	// failed; the next one runs at the status's next retry time at the
	// latest.
	ReasonPlacementFailed = "PlacementFailed"
	// ReasonProgressDeadlineExceeded: a rollout made no progress within
	// spec.updateStrategy.progressDeadlineSeconds.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonNodeUpdateFailed: a DaemonService's node-by-node update
	// stopped at a node whose new instance failed (or failed its verify
	// command) and put back the nodes it had updated.
	ReasonNodeUpdateFailed = "NodeUpdateFailed"
)

// buildLogTail bounds the end of a build log a BuildFailed condition quotes.
const buildLogTail = 2048

// WorkloadFacts are what a workload's status is derived from, each written
// by one producer under its own keys: the desired state (apply, gitsync), the
// Git source's error for the workload's directory (gitsync), the resolved
// app commit (app sources), the placements (placement), the nodes' build
// records (agents) and the instance states (heartbeats).
type WorkloadFacts struct {
	// Meta is the workload's desired-state metadata.
	Meta api.WorkloadMeta
	// TemplateHash is what the current instances run (InstanceTemplate):
	// assignments with another are old instances.
	TemplateHash string
	// Desired is the instance count the workload asks for.
	Desired int
	// FromGit is true for a workload built from an app repository.
	FromGit bool
	// App is the leader's record of the app repository, for a workload
	// built from one; nil before the first resolution.
	App *api.AppSource
	// Assigned are the workload's assignments, on every node.
	Assigned []api.Assignment
	// Reported are the agents' reports, by instance ID; an instance not
	// reported yet is absent.
	Reported map[string]api.InstanceStatus
	// Builds are the nodes' records of the build of the current app commit.
	Builds []api.Build
	// PathError is the Git source's error for the workload's directory at a
	// newer commit than the one applied; nil when there is none.
	PathError *api.PathError
	// Unplaced counts the instances placement found no node for, and
	// UnplacedReason says why (the scheduler's reason).
	Unplaced       int
	UnplacedReason string
	// Job is, for a Job, its runs and schedule; nil for other types.
	Job *JobFacts
	// Rollout is placement's rollout record; nil before the first.
	Rollout *api.Rollout
	// IngressConflicts are the rules of its spec.ingress another workload
	// holds (the ingress loop's record).
	IngressConflicts []api.IngressConflict
	// Placement is the record of the placement passes over it that failed
	// in a row; nil when the last one succeeded.
	Placement *PlacementFailure
}

// DeriveWorkloadStatus computes a workload's status from its facts. It is
// pure, and depends on prev only for the timestamps: the same facts give the
// same status whatever order they arrived in. UpdatedAt and each condition's
// LastTransitionTime move to now only when what they describe changes, so a
// caller can skip the write when the result equals prev.
//
// Phases: Ready when every desired instance of the current template is
// ready (a Job: once an instance succeeded); Failed when an instance failed
// and none runs; Degraded when an instance failed, or when every instance is
// placed but one that ran before is restarting or unhealthy; Pending while
// nothing runs and nothing is being replaced; Progressing otherwise (starting,
// rolling out).
func DeriveWorkloadStatus(f WorkloadFacts, prev api.WorkloadStatus, now time.Time) api.WorkloadStatus {
	var ready, failed, succeeded, running, fresh, stale, troubled int
	var appliedGen int64
	var lastReconcile time.Time
	instErr, waiting := "", ""
	for _, a := range f.Assigned {
		lastReconcile = maxTime(lastReconcile, a.CreatedAt, a.LeavingAt)
		// A leaving instance is in no list of ready instances: it counts
		// as an old one, whatever it runs.
		isFresh := a.TemplateHash == f.TemplateHash && !a.Leaving()
		if isFresh {
			fresh++
		} else {
			stale++
		}
		r, ok := f.Reported[a.InstanceID]
		if !ok {
			continue
		}
		switch r.Phase {
		case api.InstanceFailed:
			if isFresh {
				failed++
				if waiting == "" {
					waiting = instanceError(r)
				}
			}
			if instErr == "" {
				instErr = instanceError(r)
			}
		case api.InstanceSucceeded:
			if isFresh {
				succeeded++
			}
		case api.InstanceRunning:
			running++
		}
		if r.Message != "" && instErr == "" && r.Phase != api.InstanceRunning {
			instErr = fmt.Sprintf("instance %s: %s", r.InstanceID, r.Message)
		}
		if r.Ready() && !a.Leaving() {
			if isFresh {
				ready++
			}
			if appliedGen == 0 || a.Generation < appliedGen {
				appliedGen = a.Generation
			}
		} else if isFresh && (r.Restarts > 0 || r.HealthStatus == api.HealthUnhealthy) && r.Phase != api.InstanceSucceeded {
			troubled++
		}
	}
	settled := stale == 0 && fresh == f.Desired
	isJob := f.Meta.Type == quadlet.TypeJob
	st := api.WorkloadStatus{Desired: f.Desired, Ready: ready, Unplaced: f.Unplaced}
	if f.Unplaced > 0 {
		st.UnplacedReason = f.UnplacedReason
	}
	switch {
	case isJob && succeeded > 0:
		st.Phase = api.PhaseReady
	case failed > 0 && ready == 0 && running == 0:
		st.Phase = api.PhaseFailed
	case ready >= f.Desired && settled:
		st.Phase = api.PhaseReady
	case failed > 0 || (settled && troubled > 0):
		st.Phase = api.PhaseDegraded
	case ready == 0 && running == 0 && stale == 0:
		st.Phase = api.PhasePending
	default:
		st.Phase = api.PhaseProgressing
	}
	// The generation placement has acted on: all of it once every instance
	// of the current template is placed, else the newest one placed.
	if settled {
		st.ObservedGeneration = f.Meta.Generation
	} else {
		for _, a := range f.Assigned {
			st.ObservedGeneration = max(st.ObservedGeneration, a.Generation)
		}
	}
	st.AppliedGeneration = appliedGen
	if st.Phase == api.PhaseReady {
		st.AppliedGeneration = f.Meta.Generation
	}
	if f.FromGit && f.App != nil {
		st.SourceCommit = f.App.Commit
	}
	var backOff *api.Condition
	if ro := f.Rollout; ro != nil && ro.Replace != nil && !isJob {
		st.Attempts = ro.Replace.Attempts
		lastReconcile = maxTime(lastReconcile, ro.Replace.LastAt)
		if waiting != "" {
			// A failed instance of the current template waits for the
			// back-off (the first one is replaced at once, with no record).
			next := ro.Replace.NextAt
			st.NextRetryTime, st.RetryReason = &next, waiting
			backOff = &api.Condition{Type: ConditionReconciling, Status: api.ConditionTrue, Reason: ReasonBackOff,
				Message: fmt.Sprintf("%s; replaced no sooner than %s (attempt %d)", waiting, next.UTC().Format(time.RFC3339),
					ro.Replace.Attempts+1)}
		}
	}
	if pf := f.Placement; pf != nil {
		// A failed pass says more than an instance's back-off: nothing
		// of the workload is placed until one succeeds.
		st.Attempts = pf.Attempts
		lastReconcile = maxTime(lastReconcile, pf.LastAt)
		next := pf.NextAt
		st.NextRetryTime, st.RetryReason = &next, placementFailedPrefix+pf.Reason
		backOff = &api.Condition{Type: ConditionReconciling, Status: api.ConditionTrue, Reason: ReasonPlacementFailed,
			Message: fmt.Sprintf("%s; %d attempts in a row, the next no later than %s", st.RetryReason, pf.Attempts,
				next.UTC().Format(time.RFC3339))}
	}
	if !lastReconcile.IsZero() {
		st.LastReconcileTime = &lastReconcile
	}

	ready1 := api.Condition{Type: ConditionReady, Status: api.ConditionFalse, Reason: st.Phase,
		Message: fmt.Sprintf("%d/%d instances ready", ready, f.Desired)}
	if st.Phase == api.PhaseReady {
		ready1.Status = api.ConditionTrue
	}
	if isJob && succeeded > 0 {
		ready1.Reason, ready1.Message = ReasonSucceeded, "the job's instance exited 0"
	}
	jobFailed := ""
	if isJob && f.Job != nil {
		// A Job's status tells of its runs, not of instances ready.
		ready1, jobFailed = jobStatus(f, &st)
		instErr = jobFailed // a failed attempt a run retried is not the Job's error
	}
	conds := []api.Condition{ready1}
	switch {
	case backOff != nil:
		conds = append(conds, *backOff)
	case st.Phase == api.PhaseProgressing:
		conds = append(conds, api.Condition{Type: ConditionReconciling, Status: api.ConditionTrue, Reason: ReasonProgressing,
			Message: fmt.Sprintf("%d of %d instances of generation %d placed, %d old instances left", fresh, f.Desired, f.Meta.Generation, stale)})
	}
	var errs []string
	pending := ""
	if f.Unplaced > 0 {
		pending = fmt.Sprintf("%d instances fit on no node: %s", f.Unplaced, f.UnplacedReason)
		if f.Unplaced == 1 {
			pending = "1 instance fits on no node: " + f.UnplacedReason
		}
		conds = append(conds, api.Condition{Type: ConditionScheduled, Status: api.ConditionFalse, Reason: ReasonUnschedulable,
			Message: pending})
	}
	switch {
	case f.PathError != nil:
		msg := fmt.Sprintf("%s: %s", f.PathError.Path, f.PathError.Error)
		if f.PathError.Commit != "" {
			msg = fmt.Sprintf("commit %s: %s", api.ShortCommit(f.PathError.Commit), msg)
		}
		conds = append(conds, api.Condition{Type: ConditionStalled, Status: api.ConditionTrue, Reason: ReasonInvalidQuadlet,
			Message: msg + "; the last valid version keeps running"})
		errs = append(errs, msg)
	case st.Phase == api.PhaseFailed && jobFailed != "":
		conds = append(conds, api.Condition{Type: ConditionStalled, Status: api.ConditionTrue, Reason: ready1.Reason, Message: jobFailed})
	case st.Phase == api.PhaseFailed:
		conds = append(conds, api.Condition{Type: ConditionStalled, Status: api.ConditionTrue, Reason: ReasonInstanceFailed, Message: instErr})
	}
	if ro := f.Rollout; ro != nil && ro.Failure != nil {
		conds = append(conds, api.Condition{Type: ConditionRolloutFailed, Status: api.ConditionTrue,
			Reason: cmp.Or(ro.Failure.Reason, ReasonProgressDeadlineExceeded), Message: ro.Failure.Message})
		errs = append(errs, ro.Failure.Message)
	}
	if f.FromGit && f.App != nil && f.App.LastError != "" {
		conds = append(conds, api.Condition{Type: ConditionSourceResolved, Status: api.ConditionFalse, Reason: ReasonResolveFailed,
			Message: f.App.LastError})
		errs = append(errs, f.App.LastError)
	}
	if len(f.IngressConflicts) > 0 {
		msgs := make([]string, 0, len(f.IngressConflicts))
		for _, c := range f.IngressConflicts {
			msgs = append(msgs, IngressConflictMessage(f.Meta.Namespace, f.Meta.Name, c))
		}
		conds = append(conds, api.Condition{Type: ConditionIngressConflict, Status: api.ConditionTrue, Reason: ReasonHostPathInUse,
			Message: strings.Join(msgs, "; ")})
	}
	if msg := buildFailure(f); msg != "" {
		conds = append(conds, api.Condition{Type: ConditionBuildFailed, Status: api.ConditionTrue, Reason: api.ReasonBuildFailed,
			Message: msg})
		errs = append(errs, firstLine(msg))
	}
	if instErr != "" {
		errs = append(errs, instErr)
	}
	if pending != "" {
		errs = append(errs, pending) // the errors above say more
	}
	if len(errs) > 0 {
		st.LastError = errs[0]
	}
	for i := range conds {
		conds[i].LastTransitionTime = now
		for _, p := range prev.Conditions {
			if p.Type == conds[i].Type && p.Status == conds[i].Status && p.Reason == conds[i].Reason {
				conds[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	st.Conditions = conds
	st.UpdatedAt = prev.UpdatedAt
	if !statusEqual(st, prev) {
		st.UpdatedAt = now
	}
	return st
}

// buildFailure describes the failed builds of the current commit, by node
// name order; "" when none failed.
func buildFailure(f WorkloadFacts) string {
	if !f.FromGit || f.App == nil || f.App.Commit == "" {
		return ""
	}
	var out []string
	for _, r := range f.Builds {
		if r.State != api.BuildFailed || api.ShortCommit(r.Commit) != api.ShortCommit(f.App.Commit) {
			continue
		}
		msg := fmt.Sprintf("build of %s at %s failed on node %s: %s", f.App.Repository, api.ShortCommit(r.Commit), r.Node, r.Error)
		if tail := logTail(r.LogTail, buildLogTail); tail != "" {
			msg += "\n" + tail
		}
		out = append(out, msg)
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// logTail returns the last n bytes of s, from a line start.
func logTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func instanceError(r api.InstanceStatus) string {
	if r.Message != "" {
		return fmt.Sprintf("instance %s: %s", r.InstanceID, r.Message)
	}
	return fmt.Sprintf("instance %s failed: exit code %d after %d restarts", r.InstanceID, r.ExitCode, r.Restarts)
}

// condition returns the condition of type typ in st, nil when it has none.
func condition(st api.WorkloadStatus, typ string) *api.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return &c
		}
	}
	return nil
}

// statusEqual compares two statuses, ignoring UpdatedAt.
func statusEqual(a, b api.WorkloadStatus) bool {
	return a.ObservedGeneration == b.ObservedGeneration && a.AppliedGeneration == b.AppliedGeneration && a.Phase == b.Phase &&
		a.Desired == b.Desired && a.Ready == b.Ready && a.LastError == b.LastError && a.SourceCommit == b.SourceCommit &&
		a.Unplaced == b.Unplaced && a.UnplacedReason == b.UnplacedReason && a.LastRun == b.LastRun &&
		timePtrEqual(a.NextRunTime, b.NextRunTime) && a.Attempts == b.Attempts && a.RetryReason == b.RetryReason &&
		timePtrEqual(a.LastReconcileTime, b.LastReconcileTime) && timePtrEqual(a.NextRetryTime, b.NextRetryTime) &&
		slices.EqualFunc(a.Conditions, b.Conditions, func(x, y api.Condition) bool {
			return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message &&
				x.LastTransitionTime.Equal(y.LastTransitionTime)
		})
}

func timePtrEqual(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

// maxTime returns the latest of ts.
func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
