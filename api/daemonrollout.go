package api

import "time"

// Steps of one node in a DaemonService's node-by-node update
// (DaemonRolloutNode.Step).
const (
	// NodeStepPending: the node keeps its old instance until its turn.
	NodeStepPending = "pending"
	// NodeStepUpdating: the new instance runs beside the old one and is
	// waited for: healthy, then verified.
	NodeStepUpdating = "updating"
	// NodeStepVerified: the new instance passed; the old one is stopped.
	NodeStepVerified = "verified"
	// NodeStepFailed: the new instance failed here; the node gets its
	// previous instance back and then turns rolled back.
	NodeStepFailed = "failed"
	// NodeStepRollingBack: the update failed elsewhere; the node gets its
	// previous instance back.
	NodeStepRollingBack = "rolling back"
	// NodeStepRolledBack: the node runs its previous instance again.
	NodeStepRolledBack = "rolled back"
)

// Phases of a DaemonService's node-by-node update (DaemonRollout.Phase).
const (
	RolloutProgressing = "Progressing"
	RolloutComplete    = "Complete"
	RolloutRollingBack = "RollingBack"
	// RolloutFailed: a node failed and every node it touched is rolled
	// back; the update goes no further until the spec changes again.
	RolloutFailed = "Failed"
)

// Verification results of an instance (InstanceStatus.Verification), for a
// DaemonService whose updateStrategy has a verify command.
const (
	// VerifyPending: the instance is not healthy yet, or the command runs.
	VerifyPending = "Pending"
	VerifyPassed  = "Passed"
	VerifyFailed  = "Failed"
)

// DaemonRollout is how far a DaemonService's node-by-node update has got:
// the leader's record of it, kept in etcd so a new leader carries on, and
// shown by katcall status NS/NAME.
type DaemonRollout struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Phase is RolloutProgressing, RolloutComplete, RolloutRollingBack or
	// RolloutFailed.
	Phase string `json:"phase"`
	// TargetGeneration and TargetTemplate are the generation and instance
	// template (TemplateHash, with the app commit) being rolled out.
	TargetGeneration int64  `json:"targetGeneration"`
	TargetTemplate   string `json:"targetTemplate"`
	// MaxParallel is how many nodes are updated at once.
	MaxParallel int `json:"maxParallel"`
	// Verify says whether each node's new instance must pass the verify
	// command.
	Verify bool `json:"verify,omitempty"`
	// Nodes are the eligible nodes in the order they are updated.
	Nodes []DaemonRolloutNode `json:"nodes"`
	// Message says why the update failed.
	Message   string    `json:"message,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// DaemonRolloutNode is one node's step in a DaemonService's update.
type DaemonRolloutNode struct {
	Node string `json:"node"`
	// Step is one of the NodeStep values.
	Step string `json:"step"`
	// PreviousGeneration and PreviousTemplate are what the node ran when
	// the update began, what a rollback gives it back; empty when it ran
	// nothing.
	PreviousGeneration int64  `json:"previousGeneration,omitempty"`
	PreviousTemplate   string `json:"previousTemplate,omitempty"`
	// Instance is the node's new instance, once placed.
	Instance string `json:"instance,omitempty"`
	// Message says why the node failed.
	Message string `json:"message,omitempty"`
	// StartedAt is when the node's update began.
	StartedAt time.Time `json:"startedAt,omitzero"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// DaemonRolloutRecord is the leader's record of a DaemonService's
// node-by-node update (/kat/workloads/daemonrollout/{ns}/{name}): how far it
// got, as the API shows it (DaemonRollout), and what each node ran before,
// so that a rollback, by this leader or the next, can give it back. Only the
// leader's placement loop writes it; deleting the workload deletes it.
type DaemonRolloutRecord struct {
	DaemonRollout
	// Previous holds, by template, one assignment the nodes ran before the
	// update: a node rolled back gets a copy of its template's (files,
	// image, ports), as a new instance.
	Previous map[string]Assignment `json:"previous,omitempty"`
}
