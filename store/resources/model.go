package resources

import "kat.dws.rip/kat/api"

// The records below are the same in etcd and on the wire; api defines them
// (so that katcall links neither etcd nor the server) and this package
// stores them as they are.
type (
	// Owner says which path of desired state a workload belongs to.
	Owner = api.Owner
	// Condition is one aspect of an item's state.
	Condition = api.Condition
	// ResourceList is an amount of CPU and memory.
	ResourceList = api.ResourceList
	// NodeResources is a node's capacity and allocatable resources.
	NodeResources = api.NodeResources
	// NodeStatus is a node's last heartbeat (spec §4.1.3).
	NodeStatus = api.NodeStatus
	// InstanceStatus is one instance as its agent reports it.
	InstanceStatus = api.InstanceStatus
	// PublishedPort is a container port published on the node.
	PublishedPort = api.PublishedPort
	// GPU is one GPU of a node.
	GPU = api.GPU
	// SourceSpec is a config-repo source the leader follows.
	SourceSpec = api.SourceSpec
	// SourceAuth names a source's credential files.
	SourceAuth = api.GitAuth
	// PathError is a problem with one path of a source at a commit.
	PathError = api.PathError
	// SourceStatus is how far the leader has got with a source.
	SourceStatus = api.SourceStatus
	// Source is a source's spec and status together.
	Source = api.Source
	// Event is something that happened to an object.
	Event = api.Event
	// Rollout is the leader's record of a workload's rollouts.
	Rollout = api.Rollout
	// RolloutCounts are a workload's instances during a rollout.
	RolloutCounts = api.RolloutCounts
	// RolloutNode is one node's instances during a rollout.
	RolloutNode = api.RolloutNode
	// RolloutFailure says why a rollout failed.
	RolloutFailure = api.RolloutFailure
	// RollbackRef marks a generation written by a rollback.
	RollbackRef = api.RollbackRef
	// HistoryEntry is one archived generation of a workload.
	HistoryEntry = api.HistoryEntry
)

// Values of the records' enumerations, as api defines them.
const (
	OwnerAPI = api.OwnerAPI
	OwnerGit = api.OwnerGit

	ConditionTrue    = api.ConditionTrue
	ConditionFalse   = api.ConditionFalse
	ConditionUnknown = api.ConditionUnknown

	PhasePending     = api.PhasePending
	PhaseProgressing = api.PhaseProgressing
	PhaseReady       = api.PhaseReady
	PhaseDegraded    = api.PhaseDegraded
	PhaseFailed      = api.PhaseFailed
	PhaseRunning     = api.PhaseRunning
	PhaseSucceeded   = api.PhaseSucceeded
	PhaseScheduled   = api.PhaseScheduled

	InstancePending   = api.InstancePending
	InstanceRunning   = api.InstanceRunning
	InstanceSucceeded = api.InstanceSucceeded
	InstanceFailed    = api.InstanceFailed

	HealthHealthy       = api.HealthHealthy
	HealthUnhealthy     = api.HealthUnhealthy
	HealthPending       = api.HealthPending
	HealthNotApplicable = api.HealthNotApplicable

	VerifyPending = api.VerifyPending
	VerifyPassed  = api.VerifyPassed
	VerifyFailed  = api.VerifyFailed

	EventNormal  = api.EventNormal
	EventWarning = api.EventWarning

	OutcomeInProgress = api.OutcomeInProgress
	OutcomeSucceeded  = api.OutcomeSucceeded
	OutcomeFailed     = api.OutcomeFailed
	OutcomeRolledBack = api.OutcomeRolledBack
	OutcomeSuperseded = api.OutcomeSuperseded
)

// APIOwner is the owner of workloads applied through the API.
func APIOwner() Owner { return api.APIOwner() }
