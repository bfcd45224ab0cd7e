package api

import "time"

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

// Health states of an instance (InstanceStatus.HealthStatus).
const (
	HealthHealthy       = "healthy"
	HealthUnhealthy     = "unhealthy"
	HealthPending       = "pending_check"
	HealthNotApplicable = "not_applicable"
)

// InstanceStatus is one instance as its agent reports it, in its node's
// status (NodeStatus.WorkloadInstances).
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
	// NodeRetry is true while the instance waits only to retry a step its
	// node failed (the container runtime unreachable, the node's network
	// not made, a program missing): the agent retries it within seconds of
	// the cause going away. A rollout's progress deadline does not run out
	// while its new instances wait so.
	NodeRetry bool `json:"nodeRetry,omitempty"`
	// Verification is, for an instance whose updateStrategy has a verify
	// command, VerifyPending until the command ran in the healthy instance,
	// then VerifyPassed or VerifyFailed for good. Empty without one.
	Verification string `json:"verification,omitempty"`
	// VerifyMessage says how the verify command failed: its exit status and
	// the end of its output.
	VerifyMessage string `json:"verifyMessage,omitempty"`
	// SecretVersions are, by secret name, the versions of the secrets the
	// instance holds: its environment variables' as written when its
	// container was made, its secret files' as last replaced in place.
	SecretVersions map[string]int64 `json:"secretVersions,omitempty"`
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

// Instance is one instance of a workload as the API shows it: its
// assignment (where the leader placed it and what it runs, the Quadlet files
// left out) and what its agent last reported, each the record itself, so a
// field added to either shows here with no other edit. Its JSON is the
// assignment's fields, "status" (the report) and "ready".
type Instance struct {
	Assignment
	// Status is the agent's last report of the instance; before the first,
	// Phase is InstancePending and HealthStatus HealthPending, the rest
	// empty.
	Status InstanceStatus `json:"status"`
	// Ready is true when the instance serves: Status.Ready() (running,
	// healthy or without a health check) and not leaving (LeavingAt unset).
	// Clients that pick instances from this list use only these.
	Ready bool `json:"ready"`
}
