package leader

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

	"kat.dws.rip/kat/api"
)

// JobFacts are what a Job's status is derived from besides its
// assignments: its run records and schedule (written by placement).
type JobFacts struct {
	// Runs are the Job's run records.
	Runs []api.JobRun
	// Schedule is the parsed schedule, nil for a Job without one; Last is
	// the last firing handled (zero before the schedule is armed).
	Schedule cron.Schedule
	Last     time.Time
}

// ReasonScheduled is the reason of a Job's Ready condition while a
// scheduled Job waits for its next firing.
const ReasonScheduled = "Scheduled"

// jobStatus sets the Job parts of st (phase, counts, last and next run,
// generations) from the runs, and returns the Ready condition and, for a
// failed run, what went wrong. A Job without a schedule is Pending until
// the run of its generation starts, then Running, Succeeded or Failed as
// that run is. A scheduled Job is Running while a run is, Failed when its
// last run failed, and Scheduled otherwise; its next firing is NextRunTime.
// Desired and Ready are the last run's completions and succeeded instances.
// It is pure.
func jobStatus(f WorkloadFacts, st *api.WorkloadStatus) (ready api.Condition, failed string) {
	j := f.Job
	runs := slices.Clone(j.Runs)
	slices.SortFunc(runs, func(a, b api.JobRun) int {
		return cmp.Or(a.StartTime.Compare(b.StartTime), cmp.Compare(a.Run, b.Run))
	})
	var last *api.JobRun
	if j.Schedule == nil {
		cur := "g" + strconv.FormatInt(f.Meta.Generation, 10)
		if i := slices.IndexFunc(runs, func(r api.JobRun) bool { return r.Run == cur }); i >= 0 {
			last = &runs[i]
		}
	} else if len(runs) > 0 {
		last = &runs[len(runs)-1]
	}
	active := slices.ContainsFunc(runs, func(r api.JobRun) bool { return !r.Finished() })
	st.Desired, st.Ready, st.Unplaced, st.UnplacedReason, st.LastRun, st.NextRunTime = 0, 0, f.Unplaced, "", "", nil
	if f.Unplaced > 0 {
		st.UnplacedReason = f.UnplacedReason
	}
	if last != nil {
		st.Desired, st.Ready, st.LastRun = last.Completions, last.Succeeded, last.Run
	}
	for _, r := range slices.Backward(runs) {
		if r.State == api.RunSucceeded {
			st.AppliedGeneration = r.Generation
			break
		}
	}
	st.ObservedGeneration = 0
	if last != nil {
		st.ObservedGeneration = last.Generation
	}
	if j.Schedule != nil && !j.Last.IsZero() {
		next := j.Schedule.Next(j.Last).UTC()
		st.NextRunTime = &next
		st.ObservedGeneration = f.Meta.Generation
	}
	ready = api.Condition{Type: ConditionReady, Status: api.ConditionFalse}
	switch {
	case j.Schedule == nil && last == nil:
		st.Phase = api.PhasePending
		ready.Reason, ready.Message = api.PhasePending, "the run of generation "+strconv.FormatInt(f.Meta.Generation, 10)+" has not started"
	case active && (j.Schedule != nil || !last.Finished()):
		st.Phase = api.PhaseRunning
		r := last
		if r.Finished() { // a scheduled Job: the active run is an earlier one
			for i := range slices.Backward(runs) {
				if !runs[i].Finished() {
					r = &runs[i]
					break
				}
			}
		}
		ready.Reason, ready.Message = api.PhaseRunning, fmt.Sprintf("run %s: %d of %d completions, %d active, %d failed",
			r.Run, r.Succeeded, r.Completions, r.Active, r.Failed)
	case last != nil && last.State == api.RunFailed:
		st.Phase = api.PhaseFailed
		ready.Reason = last.Reason
		ready.Message = fmt.Sprintf("run %s failed: %s", last.Run, last.Message)
		failed = ready.Message
	case j.Schedule != nil:
		st.Phase = api.PhaseScheduled
		ready.Status, ready.Reason, ready.Message = api.ConditionTrue, ReasonScheduled, "waiting for the next firing"
		if last != nil {
			ready.Message = fmt.Sprintf("last run %s %s; waiting for the next firing", last.Run, last.State)
		}
	default:
		st.Phase = api.PhaseSucceeded
		ready.Status, ready.Reason = api.ConditionTrue, ReasonSucceeded
		ready.Message = fmt.Sprintf("run %s: %d of %d completions", last.Run, last.Succeeded, last.Completions)
	}
	if st.NextRunTime != nil && st.Phase != api.PhaseRunning {
		ready.Message += "; next run at " + st.NextRunTime.Format(time.RFC3339)
	}
	return ready, failed
}
