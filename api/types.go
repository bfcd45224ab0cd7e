package api

import "time"

// Error is the JSON body of every error response, and the error the Client
// returns for one.
type Error struct {
	// StatusCode is the HTTP status; not part of the body.
	StatusCode int `json:"-"`
	// Code is a short machine-readable reason such as "invalid" or "conflict".
	Code string `json:"error"`
	// Message says what went wrong in words an operator understands.
	Message string `json:"message"`
	// Details lists every invalid field when a Quadlet was refused.
	Details []FieldDetail `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// FieldDetail is one problem in one Quadlet file.
type FieldDetail struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error codes.
const (
	CodeBadRequest   = "bad_request"
	CodeUnauthorized = "unauthorized"
	// CodeForbidden answers a request whose credentials do not allow it
	// (HTTP 403), such as a join with a wrong token.
	CodeForbidden     = "forbidden"
	CodeNotFound      = "not_found"
	CodeConflict      = "conflict"
	CodeAlreadyExists = "already_exists"
	CodeTooLarge      = "too_large"
	// CodeUnsupportedMediaType answers a body whose Content-Type the
	// endpoint does not take (HTTP 415).
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInvalid              = "invalid"
	CodeRateLimited          = "rate_limited"
	CodeInternal             = "internal"
)

// WorkloadStatus is how far a workload's desired state is realised.
type WorkloadStatus struct {
	// ObservedGeneration is the generation the leader has placed instances
	// of.
	ObservedGeneration int64 `json:"observedGeneration"`
	// AppliedGeneration is the generation the ready instances run (the
	// current one once Ready); 0 while none is ready.
	AppliedGeneration int64       `json:"appliedGeneration"`
	Phase             string      `json:"phase"`
	Desired           int         `json:"desired"`
	Ready             int         `json:"ready"`
	Conditions        []Condition `json:"conditions"`
	LastError         string      `json:"lastError"`
	// SourceCommit is, for a workload built from an app repository, the
	// commit the leader resolved its ref to: what it runs or rolls out.
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Unplaced counts the instances the scheduler found no node for: they
	// are Pending until a node fits. Default 0.
	Unplaced int `json:"unplaced,omitempty"`
	// UnplacedReason says why, per class of node, when Unplaced > 0:
	// "3 nodes: 2 insufficient memory, 1 taint dedicated=gpu:NoSchedule".
	UnplacedReason string `json:"unplacedReason,omitempty"`
}

// Workload is a workload's metadata and status as the API returns it.
type Workload struct {
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	UID        string         `json:"uid"`
	Type       string         `json:"type"`
	Generation int64          `json:"generation"`
	SpecHash   string         `json:"specHash"`
	Owner      Owner          `json:"owner"`
	Suspended  bool           `json:"suspended"`
	Files      []string       `json:"files"`
	CreatedAt  time.Time      `json:"createdAt"`
	UpdatedAt  time.Time      `json:"updatedAt"`
	Status     WorkloadStatus `json:"status"`
}

// ApplyResult is the response to a workload POST or PUT.
type ApplyResult struct {
	Workload Workload `json:"workload"`
	// Created is true when the workload is new.
	Created bool `json:"created"`
	// Changed is false when the spec hash, owner and suspension were all as
	// stored already: nothing was written and the generation did not move.
	Changed bool `json:"changed"`
}

// Namespace is a namespace as the API returns it.
type Namespace struct {
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	Workloads int               `json:"workloads"`
}

// Node states.
const (
	NodeReady    = "Ready"
	NodeNotReady = "NotReady"
	NodeUnknown  = "Unknown"
)

// Node is a node's registration and last heartbeat.
type Node struct {
	Name             string            `json:"name"`
	UID              string            `json:"uid"`
	Status           string            `json:"status"`
	Leader           bool              `json:"leader"`
	AdvertiseAddress string            `json:"advertiseAddress"`
	APIPort          int               `json:"apiPort"`
	AgentPort        int               `json:"agentPort"`
	Labels           map[string]string `json:"labels,omitempty"`
	JoinedAt         time.Time         `json:"joinedAt"`
	LastHeartbeat    *time.Time        `json:"lastHeartbeat,omitempty"`
	Resources        NodeResources     `json:"resources"`
	// Conditions are what the node reports about itself, such as
	// RuntimeReady=False when it cannot run containers.
	Conditions []Condition `json:"conditions,omitempty"`
	// Instances is how many workload instances the node reports.
	Instances int `json:"instances"`
}

// Leader is the current leader.
type Leader struct {
	Node   string    `json:"node"`
	APIURL string    `json:"apiURL"`
	Since  time.Time `json:"since"`
}

// ClusterConfig is the cluster's configuration with its identity.
type ClusterConfig struct {
	UID       string    `json:"uid"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Spec is the ClusterConfiguration spec with defaults applied. It holds no
	// secrets: tokens are never part of it, and the webhook secret appears only
	// as the path of its file.
	Spec any `json:"spec"`
}

// Status is the cluster summary behind katcall status.
type Status struct {
	Cluster    ClusterConfig  `json:"cluster"`
	Leader     *Leader        `json:"leader,omitempty"`
	Nodes      []Node         `json:"nodes"`
	Namespaces []Namespace    `json:"namespaces"`
	Workloads  []Workload     `json:"workloads"`
	Phases     map[string]int `json:"phases"`
	// Sources are the Git sources with their status.
	Sources []Source `json:"sources"`
}

// Instance is one instance of a workload: where it is assigned and what its
// agent last reported.
type Instance struct {
	InstanceID  string `json:"instanceID"`
	Node        string `json:"node"`
	Generation  int64  `json:"generation"`
	SpecHash    string `json:"specHash"`
	ContainerID string `json:"containerID"`
	State       string `json:"state"`
	Phase       string `json:"phase"`
	Health      string `json:"health"`
	Restarts    int    `json:"restarts"`
	ExitCode    int    `json:"exitCode"`
	Image       string `json:"image"`
	// SourceCommit is the app commit the instance's image is built from
	// (or the config repo commit its spec came from).
	SourceCommit string          `json:"sourceCommit,omitempty"`
	Ports        []PublishedPort `json:"ports,omitempty"`
	Message      string          `json:"message,omitempty"`
}

// WorkloadDetail is a workload with its instances, the answer of
// GET /v1alpha1/n/{ns}/workloads/{name}/status.
type WorkloadDetail struct {
	Workload
	Instances []Instance `json:"instances"`
	// Builds are the nodes' records of the workload's image builds (a
	// workload built from an app repository), newest first.
	Builds []Build `json:"builds,omitempty"`
}

// Build is one node's record of the build of one commit of a workload: the
// build.Record the node stored under /kat/builds.
type Build struct {
	Node       string    `json:"node"`
	Commit     string    `json:"commit"`
	Image      string    `json:"image"`
	State      string    `json:"state"`
	CacheHit   bool      `json:"cacheHit"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Error      string    `json:"error,omitempty"`
	Warnings   []string  `json:"warnings,omitempty"`
}

// SyncResult is the response to a sync request.
type SyncResult struct {
	// Triggered is how many sources were asked to poll now.
	Triggered int `json:"triggered"`
}
