package resources

import (
	"errors"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
)

// WorkloadMeta is the metadata of a workload's desired state.
type WorkloadMeta struct {
	UID        string    `json:"uid"`
	Namespace  string    `json:"namespace"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Generation int64     `json:"generation"`
	SpecHash   string    `json:"specHash"`
	Owner      api.Owner `json:"owner"`
	Suspended  bool      `json:"suspended"`
	Files      []string  `json:"files"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Rollback is set on a generation a rollback wrote: the files of an
	// earlier generation applied again. Nil otherwise.
	Rollback *api.RollbackRef `json:"rollback,omitempty"`
}

// WorkloadStatus is the leader's view of how far a workload's desired state is
// realised.
type WorkloadStatus struct {
	// ObservedGeneration is the generation placement has acted on.
	ObservedGeneration int64 `json:"observedGeneration"`
	// AppliedGeneration is the generation the ready instances run: the
	// current one once the workload is Ready, an older one while a rollout
	// or a failure leaves only older instances ready, 0 when none is.
	AppliedGeneration int64           `json:"appliedGeneration"`
	Phase             string          `json:"phase"`
	Desired           int             `json:"desired"`
	Ready             int             `json:"ready"`
	Conditions        []api.Condition `json:"conditions"`
	LastError         string          `json:"lastError"`
	UpdatedAt         time.Time       `json:"updatedAt"`
	// SourceCommit is, for a workload built from an app repository, the
	// commit its current instances are built from. Default "".
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
}

// Workload is a workload's metadata and status together.
type Workload struct {
	Meta   WorkloadMeta
	Status WorkloadStatus
}

// Namespace is a namespace record.
type Namespace struct {
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
}

// Errors returned by this package; match them with errors.Is.
var (
	ErrNotFound          = errors.New("resources: not found")
	ErrAlreadyExists     = errors.New("resources: already exists")
	ErrConflict          = errors.New("resources: conflict")
	ErrNamespaceNotEmpty = errors.New("resources: namespace not empty")
	ErrProtected         = errors.New("resources: protected")
	// ErrInvalid is returned for a request that can never succeed as made,
	// such as a rollback to a generation that is not older.
	ErrInvalid = errors.New("resources: invalid request")
	// ErrSuspended is returned to a Git write of a workload whose Git
	// management is suspended.
	ErrSuspended = errors.New("resources: git management suspended")
)

// OwnershipError is returned when a writer that does not own a workload tries
// to change it. It matches ErrConflict.
type OwnershipError struct {
	Namespace, Name string
	Owner           api.Owner
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("workload %s/%s is managed by %s: change it there, or use --force to take it over and suspend Git management",
		e.Namespace, e.Name, e.Owner)
}

// Is makes an OwnershipError match ErrConflict.
func (e *OwnershipError) Is(target error) bool { return target == ErrConflict }
