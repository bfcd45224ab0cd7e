package api

import (
	"fmt"
	"time"
)

// WorkloadMeta is the metadata of a workload's desired state
// (/kat/workloads/desired/{ns}/{name}/meta, and a copy in each archived
// generation).
type WorkloadMeta struct {
	UID        string    `json:"uid"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Generation int64     `json:"generation"`
	SpecHash   string    `json:"specHash"`
	Owner      Owner     `json:"owner"`
	Suspended  bool      `json:"suspended"`
	Files      []string  `json:"files"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Rollback is set on a generation a rollback wrote: the files of an
	// earlier generation applied again. Nil otherwise.
	Rollback *RollbackRef `json:"rollback,omitempty"`
	// PinnedNode is the node the workload's spec.nodeSelector names by
	// kat.dws.rip/nodeName: a workload applied to a detached node, or
	// handed back by one, runs there only (docs/detached.md). Default "":
	// not pinned.
	PinnedNode string `json:"pinnedNode,omitempty"`
}

// WorkloadStatus is the leader's view of how far a workload's desired state
// is realised (/kat/workloads/status/{ns}/{name}); the leader's status pass
// is its only writer.
type WorkloadStatus struct {
	// ObservedGeneration is the generation placement has acted on: the
	// current one once its instances are placed.
	ObservedGeneration int64 `json:"observedGeneration"`
	// AppliedGeneration is the generation the ready instances run: the
	// current one once the workload is Ready, an older one while a rollout
	// or a failure leaves only older instances ready, 0 when none is.
	AppliedGeneration int64 `json:"appliedGeneration"`
	// Phase is one of the Phase constants.
	Phase      string      `json:"phase"`
	Desired    int         `json:"desired"`
	Ready      int         `json:"ready"`
	Conditions []Condition `json:"conditions"`
	LastError  string      `json:"lastError"`
	// UpdatedAt is when the status was last written.
	UpdatedAt time.Time `json:"updatedAt"`
	// SourceCommit is, for a workload built from an app repository, the
	// commit the leader resolved its ref to: what it runs or rolls out.
	// Default "".
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Unplaced counts the instances the scheduler found no node for: they
	// are Pending until a node fits. Default 0.
	Unplaced int `json:"unplaced,omitempty"`
	// UnplacedReason says why, per class of node, when Unplaced > 0:
	// "3 nodes: 2 insufficient memory, 1 taint dedicated=gpu:NoSchedule".
	UnplacedReason string `json:"unplacedReason,omitempty"`
	// LastRun is, for a Job, its latest run (JobRun.Run); "" before the
	// first. Default "".
	LastRun string `json:"lastRun,omitempty"`
	// NextRunTime is, for a scheduled Job, its next firing. Default nil.
	NextRunTime *time.Time `json:"nextRunTime,omitempty"`
	// Attempts counts the replacements of failed instances in a row
	// (ReplaceBackoff.Attempts). Default 0.
	Attempts int `json:"attempts,omitempty"`
	// LastReconcileTime is when placement last changed the workload's
	// instances: placed, replaced or took one out. Default nil.
	LastReconcileTime *time.Time `json:"lastReconcileTime,omitempty"`
	// NextRetryTime is, while a failed instance waits out the back-off,
	// when it is replaced; RetryReason is why it failed. Default nil, "".
	NextRetryTime *time.Time `json:"nextRetryTime,omitempty"`
	RetryReason   string     `json:"retryReason,omitempty"`
}

// Workload is a workload's metadata and status together: what etcd keeps
// under two keys (meta and status), and what the API returns, its JSON flat
// but for "status".
type Workload struct {
	WorkloadMeta
	Status WorkloadStatus `json:"status"`
}

// Owner kinds.
const (
	OwnerAPI = "api"
	OwnerGit = "git"
)

// Owner says which path of desired state a workload belongs to.
type Owner struct {
	// Kind is "api" (katcall apply) or "git" (a config-repo source).
	Kind string `json:"kind"`
	// Source, Path and Commit identify the Git source, the directory inside it
	// and the commit the spec came from; empty for "api".
	Source string `json:"source,omitempty"`
	Path   string `json:"path,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// APIOwner is the owner of workloads applied through the API.
func APIOwner() Owner { return Owner{Kind: OwnerAPI} }

// String describes the owner for messages.
func (o Owner) String() string {
	if o.Kind == OwnerGit {
		return fmt.Sprintf("git source %q path %q", o.Source, o.Path)
	}
	return o.Kind
}

// Workload phases.
const (
	PhasePending     = "Pending"
	PhaseProgressing = "Progressing"
	PhaseReady       = "Ready"
	PhaseDegraded    = "Degraded"
	PhaseFailed      = "Failed"
	// PhaseRunning, PhaseSucceeded and PhaseScheduled are a Job's: a run
	// is active; its run of the current generation succeeded; a scheduled
	// Job waits for its next firing.
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseScheduled = "Scheduled"
)

// ApplyResult is the response to a workload POST or PUT.
type ApplyResult struct {
	Workload Workload `json:"workload"`
	// Created is true when the workload is new.
	Created bool `json:"created"`
	// Changed is false when the spec hash, owner and suspension were all as
	// stored already: nothing was written and the generation did not move.
	Changed bool `json:"changed"`
}

// WorkloadDetail is a workload with its instances, the answer of
// GET /v1alpha1/n/{ns}/workloads/{name}/status.
type WorkloadDetail struct {
	Workload
	Instances []Instance `json:"instances"`
	// Builds are the nodes' records of the workload's image builds (a
	// workload built from an app repository), newest first.
	Builds []Build `json:"builds,omitempty"`
	// DaemonRollout is a DaemonService's last node-by-node update; nil
	// when it had none.
	DaemonRollout *DaemonRollout `json:"daemonRollout,omitempty"`
}
