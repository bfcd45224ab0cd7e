package api

import (
	"fmt"
	"time"
)

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

// Condition status values.
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Condition is one aspect of an item's state, in the style of Flux and
// Kubernetes conditions.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
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

// ResourceList is an amount of CPU and memory in the spec's quantity syntax.
type ResourceList struct {
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
}

// NodeResources is a node's capacity and what is allocatable to workloads.
type NodeResources struct {
	Capacity    ResourceList `json:"capacity"`
	Allocatable ResourceList `json:"allocatable"`
}

// NodeStatus is a node's heartbeat (spec §4.1.3), the body of
// POST /v1alpha1/nodes/{node}/status.
type NodeStatus struct {
	NodeName  string        `json:"nodeName"`
	NodeUID   string        `json:"nodeUID"`
	Timestamp int64         `json:"timestamp"`
	Resources NodeResources `json:"resources"`
	// WorkloadInstances are the instances assigned to the node as the agent
	// sees them.
	WorkloadInstances []InstanceStatus `json:"workloadInstances,omitempty"`
	// GPUs are the GPUs nvidia-smi reports; empty without one.
	GPUs []GPU `json:"gpus,omitempty"`
	// Conditions report node problems, such as a missing container runtime
	// (type RuntimeReady).
	Conditions []Condition `json:"conditions,omitempty"`
	// Overlay is the node's WireGuard identity; the leader records it
	// when it differs from what the cluster holds (a node that joined
	// before it had one, or whose port changed). Nil: no overlay.
	Overlay *NodeOverlay `json:"overlay,omitempty"`
}

// NodeOverlay is a node's place in the WireGuard overlay as the node
// reports it: its public key and the port at its advertise address.
type NodeOverlay struct {
	// PublicKey is the base64 WireGuard public key.
	PublicKey string `json:"publicKey"`
	// Port is the UDP port the device listens on.
	Port int `json:"port"`
}

// Instance phases, the agent's verdict on one instance.
const (
	// InstancePending: no container is running yet (pulling, creating,
	// waiting for a restart back-off).
	InstancePending = "Pending"
	// InstanceRunning: the container runs.
	InstanceRunning = "Running"
	// InstanceSucceeded: the container exited 0 and is not restarted.
	InstanceSucceeded = "Succeeded"
	// InstanceFailed: the container exited and the restart policy gives up.
	InstanceFailed = "Failed"
)

// Health states of an instance (spec §4.1.3 healthStatus).
const (
	HealthHealthy       = "healthy"
	HealthUnhealthy     = "unhealthy"
	HealthPending       = "pending_check"
	HealthNotApplicable = "not_applicable"
)

// InstanceStatus is one instance as its agent reports it (spec §4.1.3
// workloadInstances).
type InstanceStatus struct {
	WorkloadName string `json:"workloadName"`
	Namespace    string `json:"namespace"`
	InstanceID   string `json:"instanceID"`
	Generation   int64  `json:"generation"`
	SpecHash     string `json:"specHash"`
	ContainerID  string `json:"containerID,omitempty"`
	ImageID      string `json:"imageID,omitempty"`
	Image        string `json:"image"`
	// State is the container's state: running, exited, created, paused,
	// unknown, or empty when there is no container yet.
	State string `json:"state"`
	// Phase is InstancePending, InstanceRunning, InstanceSucceeded or
	// InstanceFailed.
	Phase        string `json:"phase"`
	ExitCode     int    `json:"exitCode"`
	HealthStatus string `json:"healthStatus"`
	// Restarts counts the restarts the agent made, kept across agent
	// restarts.
	Restarts int `json:"restarts"`
	// RestartWindowStart is when the current MaxCount window began.
	RestartWindowStart time.Time `json:"restartWindowStart,omitzero"`
	// WindowRestarts counts the restarts since RestartWindowStart.
	WindowRestarts int `json:"windowRestarts,omitempty"`
	// Ports are the container ports published on the node.
	Ports     []PublishedPort `json:"ports,omitempty"`
	StartedAt time.Time       `json:"startedAt,omitzero"`
	// Message says what the agent last failed to do, or why it waits.
	Message string `json:"message,omitempty"`
	// Verification is, for an instance whose updateStrategy has a verify
	// command, VerifyPending until the command ran in the healthy instance,
	// then VerifyPassed or VerifyFailed for good. Empty without one.
	Verification string `json:"verification,omitempty"`
	// VerifyMessage says how the verify command failed: its exit status and
	// the end of its output.
	VerifyMessage string `json:"verifyMessage,omitempty"`
}

// Ready reports whether the instance counts towards a workload's ready
// instances: running and healthy (or without a health check).
func (s InstanceStatus) Ready() bool {
	return s.Phase == InstanceRunning && (s.HealthStatus == HealthHealthy || s.HealthStatus == HealthNotApplicable)
}

// PublishedPort is a container port published on the node.
type PublishedPort struct {
	HostIP        string `json:"hostIP,omitempty"`
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

// GPU is one GPU of a node.
type GPU struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	Driver  string `json:"driver"`
	VRAMMiB int    `json:"vramMiB"`
}

// SourceSpec is a config-repo source the leader follows
// (/kat/sources/{source}/spec), the body of PUT /v1alpha1/sources/{name}.
type SourceSpec struct {
	// Name is the source's name, a DNS label.
	Name string `json:"name"`
	// URL is an https://, http://, ssh:// or file:// URL, without a password.
	URL string `json:"url"`
	// Branch is the branch followed. Default "main".
	Branch string `json:"branch"`
	// Path is the directory of the repository holding the workload
	// directories. Default ".".
	Path string `json:"path"`
	// IntervalSeconds is the time between polls. Default 30.
	IntervalSeconds int `json:"intervalSeconds"`
	// Auth names files on the leader holding credentials; empty: none.
	Auth GitAuth `json:"auth,omitzero"`
	// KeyringFile is an armored PGP public keyring on the leader; when set,
	// only commits signed by one of its keys are applied. Default none.
	KeyringFile string `json:"keyringFile,omitempty"`
	// AllowPruneAll lets a commit delete every workload of the source.
	// Default false: such a commit is refused.
	AllowPruneAll bool `json:"allowPruneAll,omitempty"`
	// UpdatedAt is when the spec was last written.
	UpdatedAt time.Time `json:"updatedAt"`
}

// GitAuth names the files holding the credentials of a Git repository: a
// config-repo source's, or the app repositories' (kat-agent
// --app-repo-* flags). At most one of TokenFile, BasicAuthFile and
// SSHKeyFile is set. The credentials themselves never enter etcd or the
// API; the files are read on the node that uses them, at every use, so a
// rotated secret is picked up.
type GitAuth struct {
	// TokenFile holds a token (first line) sent as the HTTP basic password,
	// with Username (default "x-access-token") as the user.
	TokenFile string `json:"tokenFile,omitempty"`
	// Username is the HTTP user sent with TokenFile, or the SSH user
	// (default: the URL's user, else "git").
	Username string `json:"username,omitempty"`
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string `json:"basicAuthFile,omitempty"`
	// SSHKeyFile is an unencrypted PEM private key for ssh:// and scp-like
	// URLs.
	SSHKeyFile string `json:"sshKeyFile,omitempty"`
	// KnownHostsFile is the known_hosts file SSH host keys are checked
	// against; required with SSHKeyFile.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
}

// PathError is a problem with one path of a source at a commit.
type PathError struct {
	// Path is the directory or file inside the repository.
	Path string `json:"path"`
	// Error says what is wrong, with file and line where known.
	Error string `json:"error"`
	// Commit is the commit the error was found at.
	Commit string `json:"commit,omitempty"`
}

// SourceStatus is how far the leader has got with a source.
type SourceStatus struct {
	// FetchedCommit is the branch head last fetched.
	FetchedCommit string `json:"fetchedCommit,omitempty"`
	// AppliedCommit is the last commit whose changes were all written.
	AppliedCommit string `json:"appliedCommit,omitempty"`
	// LastAttemptedCommit is the last commit an apply was started for.
	LastAttemptedCommit string `json:"lastAttemptedCommit,omitempty"`
	// LastFetchTime is when the remote was last reached.
	LastFetchTime time.Time `json:"lastFetchTime,omitzero"`
	// LastAppliedTime is when AppliedCommit was written.
	LastAppliedTime time.Time `json:"lastAppliedTime,omitzero"`
	// LastError is the last error of the source as a whole; empty when the
	// last attempt succeeded.
	LastError string `json:"lastError,omitempty"`
	// PathErrors are the directories of AppliedCommit that could not be
	// applied; they keep their last good desired state.
	PathErrors []PathError `json:"pathErrors,omitempty"`
	// Workloads is how many workloads the source manages.
	Workloads int `json:"workloads"`
	// Conditions are Ready, and Stalled or Reconciling when true.
	Conditions []Condition `json:"conditions,omitempty"`
	// UpdatedAt is when the status was last written.
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Source is a Git source's spec and status together.
type Source struct {
	Spec   SourceSpec   `json:"spec"`
	Status SourceStatus `json:"status"`
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Event is something that happened to an object, kept under /kat/events/.
type Event struct {
	Time time.Time `json:"time"`
	// Type is EventNormal or EventWarning.
	Type string `json:"type"`
	// Object names what the event is about, such as "source/config" or
	// "workload/demo/web".
	Object string `json:"object"`
	// Reason is a CamelCase word, such as "Applied" or "PruneRefused".
	Reason string `json:"reason"`
	// Message says what happened.
	Message string `json:"message"`
}

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
	// more ready than ever, or an old instance fewer than ever.
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
// history lists it.
type HistoryEntry struct {
	Generation int64  `json:"generation"`
	SpecHash   string `json:"specHash"`
	// SourceCommit is the config repo commit the files came from; empty for
	// an API apply.
	SourceCommit string `json:"sourceCommit"`
	// Time is when the generation was applied.
	Time time.Time `json:"time"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Rollback is set on a generation a rollback wrote.
	Rollback *RollbackRef `json:"rollback,omitempty"`
}

// RolloutStatus is the answer of GET .../workloads/{name}/rollout: the
// rollout of the current generation, and the outcome of the generation
// asked about (?generation=, default the current one).
type RolloutStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	// Generation is the workload's current generation.
	Generation int64 `json:"generation"`
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
