package api

import "time"

// Outcomes of a generation's rollout, as katcall history shows them.
const (
	// OutcomeInProgress: the generation is the current one and its rollout
	// has neither completed nor failed.
	OutcomeInProgress = "in progress"
	// OutcomeSucceeded: every instance ran the generation and was ready.
	OutcomeSucceeded = "succeeded"
	// OutcomeFailed: the rollout made no progress within its deadline.
	OutcomeFailed = "failed"
	// OutcomeRolledBack: a rollback (katcall rollback, or an automatic one
	// after a failure) replaced the generation.
	OutcomeRolledBack = "rolled back"
	// OutcomeSuperseded: a newer generation was applied before this one's
	// rollout ended.
	OutcomeSuperseded = "superseded"
)

// RollbackRef marks a generation written by a rollback: it holds the files
// of generation To again, replacing generation From.
type RollbackRef struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Auto is true for a rollback the leader made after a failed rollout.
	Auto bool `json:"auto,omitempty"`
}

// Rollout is the leader's record of a workload's rollouts
// (/kat/workloads/rollouts/{ns}/{name}), written by its placement loop
// only: the current generation's progress, and the outcome of the
// generations before it.
type Rollout struct {
	// Generation is the generation being, or last, rolled out.
	Generation int64 `json:"generation"`
	// StartedAt is when the leader first planned Generation.
	StartedAt time.Time `json:"startedAt"`
	// ProgressAt is when the rollout last made progress: a new instance
	// more ready than ever, or an old instance fewer than ever. While its
	// new instances wait only on their nodes' retries
	// (InstanceStatus.NodeRetry) it moves to the present every half
	// deadline, so the deadline does not run out meanwhile.
	ProgressAt time.Time `json:"progressAt"`
	// CompletedAt is when Generation's outcome was settled; zero while it
	// is in progress.
	CompletedAt time.Time `json:"completedAt,omitzero"`
	// MostNewReady and FewestOld are the progress marks ProgressAt
	// follows.
	MostNewReady int `json:"mostNewReady"`
	FewestOld    int `json:"fewestOld"`
	// DeadlineSeconds is the progress deadline the rollout runs under.
	DeadlineSeconds int `json:"deadlineSeconds"`
	// Counts are the instances as the last planning pass found them.
	Counts RolloutCounts `json:"counts"`
	// Nodes are, for a DaemonService, the counts per node, by name.
	Nodes []RolloutNode `json:"nodes,omitempty"`
	// Outcomes are the settled outcomes by generation: OutcomeSucceeded or
	// OutcomeFailed.
	Outcomes map[int64]string `json:"outcomes,omitempty"`
	// Failure is the last failed rollout; nil once a later rollout (other
	// than its rollback) starts.
	Failure *RolloutFailure `json:"failure,omitempty"`
	// Replace is the back-off of the workload's failed instances (a
	// Service's replaced, a DaemonService's restarted on its node); nil
	// before the first failure of the generation, or once the workload
	// has been stable for a while.
	Replace *ReplaceBackoff `json:"replace,omitempty"`
}

// ReplaceBackoff is a workload's back-off between replacements of its
// failed instances: the first failure is replaced at once, each one after
// it no sooner than NextAt, which doubles with every attempt up to a cap.
type ReplaceBackoff struct {
	// Attempts counts the replacements in a row: each came within the
	// reset period of the one before.
	Attempts int `json:"attempts"`
	// LastAt is when the last failed instances were replaced.
	LastAt time.Time `json:"lastAt"`
	// NextAt is the earliest time a failed instance is replaced again.
	NextAt time.Time `json:"nextAt"`
	// Instances are the failed instances LastAt's attempt replaced: a pass
	// that finds one of them still assigned replaces it without counting
	// an attempt again.
	Instances []string `json:"instances,omitempty"`
	// Reason is what the agent reported about the last failed instance.
	Reason string `json:"reason,omitempty"`
}

// RolloutCounts are a workload's instances during a rollout: of the current
// generation (new) and of older ones (old), and those leaving (out of every
// ready list, stopping after the drain delay).
type RolloutCounts struct {
	Desired  int `json:"desired"`
	New      int `json:"new"`
	NewReady int `json:"newReady"`
	Old      int `json:"old"`
	OldReady int `json:"oldReady"`
	Leaving  int `json:"leaving"`
}

// RolloutNode is one node's instances of a DaemonService during a rollout.
type RolloutNode struct {
	Node     string `json:"node"`
	New      int    `json:"new"`
	NewReady int    `json:"newReady"`
	Old      int    `json:"old"`
}

// RolloutFailure says why a rollout failed and what was done about it.
type RolloutFailure struct {
	Generation int64     `json:"generation"`
	At         time.Time `json:"at"`
	// Message is the cause: what was ready and what the new instances last
	// reported.
	Message string `json:"message"`
	// Reason is ProgressDeadlineExceeded, or NodeUpdateFailed when a
	// DaemonService's node-by-node update stopped at a failing node; empty
	// in records written before it existed (the deadline).
	Reason string `json:"reason,omitempty"`
	// RollbackTo is the generation whose files are applied again; 0 when
	// there is no rollback (autoRollback false, or no earlier generation
	// succeeded).
	RollbackTo int64 `json:"rollbackTo,omitempty"`
}

// HistoryEntry is one archived generation of a workload, as katcall
// history lists it: the generation's metadata as archived (its
// generation, spec hash, owner with the config repo commit its files came
// from, UpdatedAt when it was applied, and Rollback when a rollback wrote
// it) with the outcome of its rollout.
type HistoryEntry struct {
	WorkloadMeta
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
}

// RolloutStatus is the answer of GET .../workloads/{name}/rollout: the
// rollout of the current generation, and the outcome of the generation
// asked about (?generation=, default the current one).
type RolloutStatus struct {
	// WorkloadMeta is the workload's metadata: Generation is its current
	// generation.
	WorkloadMeta
	// Asked is the generation Outcome is about.
	Asked int64 `json:"asked"`
	// Outcome is Asked's outcome (the Outcome constants).
	Outcome string `json:"outcome"`
	// Rollout is the leader's record; its Generation lags Generation until
	// the leader has planned the latest.
	Rollout Rollout `json:"rollout"`
	// Daemon is a DaemonService's node-by-node update (each node's step),
	// when it has one.
	Daemon *DaemonRollout `json:"daemon,omitempty"`
}

// RollbackResult is the answer of POST .../workloads/{name}/rollback.
type RollbackResult struct {
	Workload Workload `json:"workload"`
	// From is the generation replaced, To the one whose files were applied
	// again as Workload.Generation.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// GitSuspended is true when the workload is Git-owned: its Git
	// management is suspended until katcall resume.
	GitSuspended bool `json:"gitSuspended"`
}
