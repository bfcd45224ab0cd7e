package leader

import (
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// TestJobStatus checks the Job part of a workload's status: the phase, the
// counts of the run that matters, the Ready condition and the next firing,
// never "Ready 0/1" for a Job.
func TestJobStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 10, 0, 30, 0, time.UTC)
	cron, err := quadlet.ParseSchedule("*/5 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	done := now
	run := func(name string, gen int64, state string, succeeded, failed, active int) api.JobRun {
		r := api.JobRun{Namespace: "ns1", Name: "j", Run: name, Generation: gen, State: state, Completions: 2,
			Succeeded: succeeded, Failed: failed, Active: active, StartTime: now.Add(-time.Duration(10-gen) * time.Minute)}
		if state != api.RunRunning {
			r.CompletionTime = &done
			r.Reason, r.Message = api.RunReasonCompleted, "2 of 2 completions"
			if state == api.RunFailed {
				r.Reason, r.Message = api.RunReasonDeadlineExceeded, "still running 30s after its start (activeDeadlineSeconds)"
			}
		}
		return r
	}
	for _, tc := range []struct {
		name                  string
		gen                   int64
		job                   JobFacts
		wantPhase, wantReason string
		wantReady             string
		wantCounts            [2]int // ready, desired
		wantNext              bool
	}{
		{name: "no run yet", gen: 1, job: JobFacts{}, wantPhase: api.PhasePending, wantReason: api.PhasePending,
			wantReady: api.ConditionFalse},
		{name: "running", gen: 1, job: JobFacts{Runs: []api.JobRun{run("g1", 1, api.RunRunning, 1, 0, 1)}},
			wantPhase: api.PhaseRunning, wantReason: api.PhaseRunning, wantReady: api.ConditionFalse, wantCounts: [2]int{1, 2}},
		{name: "succeeded", gen: 1, job: JobFacts{Runs: []api.JobRun{run("g1", 1, api.RunSucceeded, 2, 1, 0)}},
			wantPhase: api.PhaseSucceeded, wantReason: ReasonSucceeded, wantReady: api.ConditionTrue, wantCounts: [2]int{2, 2}},
		{name: "failed", gen: 1, job: JobFacts{Runs: []api.JobRun{run("g1", 1, api.RunFailed, 0, 0, 0)}},
			wantPhase: api.PhaseFailed, wantReason: api.RunReasonDeadlineExceeded, wantReady: api.ConditionFalse, wantCounts: [2]int{0, 2}},
		{name: "a new generation's run not started yet", gen: 2, job: JobFacts{Runs: []api.JobRun{run("g1", 1, api.RunSucceeded, 2, 0, 0)}},
			wantPhase: api.PhasePending, wantReason: api.PhasePending, wantReady: api.ConditionFalse},
		{name: "scheduled, armed", gen: 1, job: JobFacts{Schedule: cron, Last: now},
			wantPhase: api.PhaseScheduled, wantReason: ReasonScheduled, wantReady: api.ConditionTrue, wantNext: true},
		{name: "scheduled, last run succeeded", gen: 1, job: JobFacts{Schedule: cron, Last: now,
			Runs: []api.JobRun{run("a", 1, api.RunFailed, 0, 0, 0), run("b", 2, api.RunSucceeded, 2, 0, 0)}},
			wantPhase: api.PhaseScheduled, wantReason: ReasonScheduled, wantReady: api.ConditionTrue, wantCounts: [2]int{2, 2}, wantNext: true},
		{name: "scheduled, last run failed", gen: 1, job: JobFacts{Schedule: cron, Last: now,
			Runs: []api.JobRun{run("a", 1, api.RunSucceeded, 2, 0, 0), run("b", 2, api.RunFailed, 0, 0, 0)}},
			wantPhase: api.PhaseFailed, wantReason: api.RunReasonDeadlineExceeded, wantReady: api.ConditionFalse, wantCounts: [2]int{0, 2},
			wantNext: true},
		{name: "scheduled, an earlier run still going", gen: 1, job: JobFacts{Schedule: cron, Last: now,
			Runs: []api.JobRun{run("a", 1, api.RunRunning, 1, 0, 1), run("b", 2, api.RunSucceeded, 2, 0, 0)}},
			wantPhase: api.PhaseRunning, wantReason: api.PhaseRunning, wantReady: api.ConditionFalse, wantCounts: [2]int{2, 2}, wantNext: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := tc.job
			f := WorkloadFacts{Meta: api.WorkloadMeta{Namespace: "ns1", Name: "j", Type: quadlet.TypeJob, Generation: tc.gen}, Job: &job}
			st := DeriveWorkloadStatus(f, api.WorkloadStatus{}, now)
			c := condition(st, ConditionReady)
			if st.Phase != tc.wantPhase || c == nil || c.Reason != tc.wantReason || c.Status != tc.wantReady ||
				st.Ready != tc.wantCounts[0] || st.Desired != tc.wantCounts[1] {
				t.Fatalf("phase %s ready %d/%d condition %+v; want %s %d/%d %s %s", st.Phase, st.Ready, st.Desired, c,
					tc.wantPhase, tc.wantCounts[0], tc.wantCounts[1], tc.wantReady, tc.wantReason)
			}
			if want := now.Truncate(5 * time.Minute).Add(5 * time.Minute); tc.wantNext != (st.NextRunTime != nil) ||
				(tc.wantNext && !st.NextRunTime.Equal(want)) {
				t.Errorf("next run %v, want %v (%v)", st.NextRunTime, want, tc.wantNext)
			}
			if stalled := condition(st, ConditionStalled); (st.Phase == api.PhaseFailed) != (stalled != nil) || (stalled != nil && st.LastError == "") {
				t.Errorf("phase %s with Stalled %+v and last error %q", st.Phase, stalled, st.LastError)
			}
		})
	}
}
