package resources

import (
	"context"
	"errors"
	"fmt"
	"time"

	"kat.dws.rip/kat/store"
)

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

// GetNodeStatus returns a node's last reported status.
func (r *Repo) GetNodeStatus(ctx context.Context, node string) (*NodeStatus, error) {
	var st NodeStatus
	ver, err := r.getJSON(ctx, NodeStatusKey(node), &st)
	if err != nil {
		return nil, fmt.Errorf("read status of node %q: %w", node, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("status of node %q: %w", node, ErrNotFound)
	}
	return &st, nil
}

// ListNodeStatuses returns every node's last reported status.
func (r *Repo) ListNodeStatuses(ctx context.Context) ([]NodeStatus, error) {
	nodes, err := r.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []NodeStatus
	for _, n := range nodes {
		if n.Status != nil {
			out = append(out, *n.Status)
		}
	}
	return out, nil
}

// PutWorkloadStatus writes a workload's status, only while the workload
// exists: a status never outlives its workload's deletion.
func (r *Repo) PutWorkloadStatus(ctx context.Context, ns, name string, st WorkloadStatus) error {
	op, err := putJSON(StatusKey(ns, name), st)
	if err != nil {
		return err
	}
	kv, err := r.st.Get(ctx, MetaKey(ns, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	if _, err := r.st.DoTransaction(ctx, []store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: kv.Version}}, []store.Op{op}, nil); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	return nil
}

// UpdateWorkloadStatus replaces the status of workload ns/name with what fn
// makes of the stored one, in a transaction that fails when another writer
// (SetWorkloadCondition) changed it meanwhile; fn then runs again on the
// newer status, so no writer's condition is lost. fn returns false to write
// nothing. A missing workload is not an error.
func (r *Repo) UpdateWorkloadStatus(ctx context.Context, ns, name string, fn func(prev WorkloadStatus) (WorkloadStatus, bool)) error {
	for range maxTxnAttempts {
		meta, err := r.st.Get(ctx, MetaKey(ns, name))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		var prev WorkloadStatus
		ver, err := r.getJSON(ctx, StatusKey(ns, name), &prev)
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		next, write := fn(prev)
		if !write {
			return nil
		}
		op, err := putJSON(StatusKey(ns, name), next)
		if err != nil {
			return err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{
			{Key: MetaKey(ns, name), ExpectedVersion: meta.Version}, {Key: StatusKey(ns, name), ExpectedVersion: ver},
		}, []store.Op{op}, nil)
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("update status of %s/%s: %w: too many concurrent writers", ns, name, ErrConflict)
}
