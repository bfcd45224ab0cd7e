package api

import (
	"time"
)

// Job run states (JobRun.State).
const (
	RunRunning   = "Running"
	RunSucceeded = "Succeeded"
	RunFailed    = "Failed"
)

// Reasons a run finished (JobRun.Reason).
const (
	// RunReasonCompleted: Completions instances succeeded.
	RunReasonCompleted = "Completed"
	// RunReasonBackoffLimitExceeded: BackoffLimit + 1 instances failed.
	RunReasonBackoffLimitExceeded = "BackoffLimitExceeded"
	// RunReasonDeadlineExceeded: the run was still going
	// ActiveDeadlineSeconds after its start; its instances were stopped.
	RunReasonDeadlineExceeded = "DeadlineExceeded"
	// RunReasonReplaced: a scheduled firing with concurrencyPolicy Replace
	// stopped the run.
	RunReasonReplaced = "Replaced"
	// RunReasonSuperseded: a new generation of a Job without a schedule
	// started a new run and stopped this one.
	RunReasonSuperseded = "Superseded"
)

// Job run instance states (JobRunInstance.State): an instance's phase as
// its agent reports it, and Stopped for one the leader stopped (deadline,
// replacement) before it finished.
const (
	RunInstancePending   = "Pending"
	RunInstanceRunning   = "Running"
	RunInstanceSucceeded = "Succeeded"
	RunInstanceFailed    = "Failed"
	RunInstanceStopped   = "Stopped"
)

// JobRun is one run of a Job: the single run of a Job without a schedule
// (one per generation), or one firing of a scheduled Job. The leader keeps
// it at /kat/jobs/{ns}/{name}/runs/{run}, writes it alone, and returns it
// from GET /v1alpha1/jobs.
type JobRun struct {
	Namespace string `json:"namespace"`
	// Name is the Job workload's name.
	Name string `json:"name"`
	// Run names the run within its Job: "g{generation}" for a Job without a
	// schedule, the UTC time of the firing (20261124T1630Z) for a scheduled
	// one.
	Run string `json:"run"`
	// Generation is the workload generation the run was started at.
	Generation int64 `json:"generation"`
	// State is RunRunning, RunSucceeded or RunFailed.
	State string `json:"state"`
	// Reason says why a finished run finished (RunReason...); "" while it
	// runs.
	Reason string `json:"reason"`
	// Message says more about Reason.
	Message string `json:"message,omitempty"`
	// Succeeded, Failed and Active count the run's instances that exited
	// 0, that failed (lost with their node included), and that are placed
	// and not finished.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Active    int `json:"active"`
	// ScheduledTime is the firing that started a scheduled run; zero for a
	// Job without a schedule.
	ScheduledTime time.Time `json:"scheduledTime,omitzero"`
	// StartTime is when the leader started the run; ActiveDeadlineSeconds
	// counts from it.
	StartTime time.Time `json:"startTime"`
	// CompletionTime is when the run finished; nil while it runs.
	CompletionTime *time.Time `json:"completionTime"`
	// Completions, Parallelism, BackoffLimit and ActiveDeadlineSeconds are
	// job.kat's at the run's start: a changed job.kat applies to later runs.
	Completions           int `json:"completions"`
	Parallelism           int `json:"parallelism"`
	BackoffLimit          int `json:"backoffLimit"`
	ActiveDeadlineSeconds int `json:"activeDeadlineSeconds,omitempty"`
	// Instances are the run's instances in the order they were made.
	Instances []JobRunInstance `json:"instances"`
}

// Finished reports whether the run has succeeded or failed.
func (r JobRun) Finished() bool { return r.State == RunSucceeded || r.State == RunFailed }

// JobRunInstance is one instance of a run: one attempt at a completion.
type JobRunInstance struct {
	InstanceID string `json:"instanceID"`
	Node       string `json:"node"`
	// State is RunInstance...: the agent's report, or Stopped.
	State string `json:"state"`
	// ExitCode is the container's exit code once it exited.
	ExitCode int `json:"exitCode"`
	// Message is the agent's message or why the leader gave the instance
	// up (its node was lost).
	Message    string    `json:"message,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Done reports whether the instance has finished (succeeded, failed or
// stopped).
func (i JobRunInstance) Done() bool {
	return i.State == RunInstanceSucceeded || i.State == RunInstanceFailed || i.State == RunInstanceStopped
}

// JobSchedule is a scheduled Job's memory of its firings: the leader judges
// the next firing from it, so a new leader neither repeats a firing nor
// stacks the ones missed while there was none.
type JobSchedule struct {
	// LastScheduleTime is the last firing handled (run, skipped, or the
	// moment the schedule was first seen).
	LastScheduleTime time.Time `json:"lastScheduleTime"`
	// Skipped counts the firings skipped because of concurrencyPolicy
	// Forbid.
	Skipped int `json:"skipped,omitempty"`
}
