package api

import (
	"fmt"
	"time"
)

// This file holds the records that are the same on the wire and in etcd:
// the store (store/resources) keeps them as they are, so they are defined
// once, here, where the client can use them without linking the server.

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
