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
	// CodeUnavailable answers a request a server cannot serve now but
	// another member of the cluster may (HTTP 503): it has no leader to
	// answer for. Clients try the next server.
	CodeUnavailable = "unavailable"
	// CodeMethodNotAllowed answers a webhook sent with another method than
	// POST (HTTP 405).
	CodeMethodNotAllowed = "method_not_allowed"
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

// NamespaceView is a namespace as the API returns it: the record with the
// number of its workloads.
type NamespaceView struct {
	Namespace
	Workloads int `json:"workloads"`
}

// Node states.
const (
	NodeReady    = "Ready"
	NodeNotReady = "NotReady"
	NodeUnknown  = "Unknown"
)

// Node is a node as the API returns it: its registration, with what its
// last heartbeat said and what the leader placed on it.
type Node struct {
	NodeRegistration
	// Status is NodeReady, NodeNotReady, or NodeUnknown for a node that
	// never beat.
	Status string `json:"status"`
	// Leader marks the node that leads the cluster.
	Leader        bool       `json:"leader"`
	LastHeartbeat *time.Time `json:"lastHeartbeat,omitempty"`
	// Resources and Conditions are what the node's last heartbeat
	// reported: its capacity, and problems such as RuntimeReady=False when
	// it cannot run containers.
	Resources  NodeResources `json:"resources"`
	Conditions []Condition   `json:"conditions,omitempty"`
	// Instances is how many instances the leader has placed on the node
	// (its assignments), ended Job instances included.
	Instances int `json:"instances"`
	// Requested is the sum of what the instances placed on the node request.
	Requested NodeRequested `json:"requested"`
	// Active counts, by workload type (Service, DaemonService, Job), the
	// instances placed on the node that have not ended: every Service and
	// DaemonService instance, and the Job instances its agent has not
	// reported Succeeded or Failed. A drained node has none.
	Active map[string]int `json:"active,omitempty"`
	// HeartbeatAgeSeconds is how old LastHeartbeat was when the server
	// answered; absent when the node never beat.
	HeartbeatAgeSeconds *int64 `json:"heartbeatAgeSeconds,omitempty"`
}

// Node schedulability, as StatusText shows it beside the readiness.
const (
	NodeCordoned = "Cordoned"
	NodeDraining = "Draining"
)

// StatusText is the node's readiness with its schedulability, as katcall get
// nodes shows it: "Ready", "NotReady,Cordoned", "Ready,Draining".
func (n Node) StatusText() string {
	switch {
	case n.Draining:
		return n.Status + "," + NodeDraining
	case n.Unschedulable:
		return n.Status + "," + NodeCordoned
	}
	return n.Status
}

// NodeRequested is what the instances placed on a node request in total.
type NodeRequested struct {
	CPUMillis   int64 `json:"cpuMillis"`
	MemoryBytes int64 `json:"memoryBytes"`
	// GPUs is how many of the node's GPUs instances hold.
	GPUs int `json:"gpus"`
}

// TaintChange is the body of PATCH /v1alpha1/nodes/{node}/taints, with
// kubectl taint's semantics.
type TaintChange struct {
	// Add adds taints; one with the key and effect of a taint the node has
	// replaces it only with Overwrite (else the request is refused).
	Add []Taint `json:"add,omitempty"`
	// Remove removes, per item, the taint of that key and effect, or with
	// no effect every taint of that key; one that matches nothing is
	// refused.
	Remove []Taint `json:"remove,omitempty"`
	// Overwrite lets Add replace a taint of the same key and effect.
	Overwrite bool `json:"overwrite,omitempty"`
}

// JoinTokenResponse is the answer of POST /v1alpha1/join-token: the new
// join token.
type JoinTokenResponse struct {
	// Token is the whole join token (katjoin1.SECRET.FINGERPRINT), as
	// kat-agent join --token-file reads it.
	Token string `json:"token"`
}

// MetricsCertPrefix begins the common name of a metrics certificate
// (POST /v1alpha1/metrics-certificates): a client certificate of the
// cluster CA that may scrape /metrics on every node's agent port and every
// member's API port, and nothing else. Node names are DNS labels, so no
// node's certificate has it.
const MetricsCertPrefix = "kat-metrics:"

// MetricsCertRequest is the body of POST /v1alpha1/metrics-certificates.
type MetricsCertRequest struct {
	// Name names the scraper (a DNS label, such as "prometheus"); the
	// certificate's common name is MetricsCertPrefix + Name.
	Name string `json:"name"`
	// CSR is a PEM-encoded certificate signing request for the scraper's
	// key; only its key is used (the names are the leader's choice).
	CSR string `json:"csr"`
	// ValidityDays is how long the certificate is valid, 1 to
	// MaxMetricsCertDays. Default DefaultMetricsCertDays. Nothing revokes
	// a metrics certificate before it expires.
	ValidityDays int `json:"validityDays,omitempty"`
}

// Validity of metrics certificates, in days.
const (
	DefaultMetricsCertDays = 365
	MaxMetricsCertDays     = 5 * 365
)

// MetricsCertResponse is the answer of POST /v1alpha1/metrics-certificates.
type MetricsCertResponse struct {
	// Certificate is the PEM-encoded client certificate.
	Certificate string `json:"certificate"`
	// CA is the cluster CA's certificate (PEM), to verify the nodes' ports.
	CA string `json:"ca"`
	// NotAfter is when the certificate expires.
	NotAfter time.Time `json:"notAfter"`
}

// Leader is the current leader as it publishes itself
// (/kat/config/leader_endpoint): its node, the URL of its API and when it
// began to lead.
type Leader struct {
	Node   string    `json:"node"`
	APIURL string    `json:"apiURL"`
	Since  time.Time `json:"since"`
}

// ClusterServers are the API URLs of the cluster's etcd members, which
// katcall and webhook senders may use: the leader's first.
type ClusterServers struct {
	Leader  string   `json:"leader,omitempty"`
	Servers []string `json:"servers"`
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
	Cluster    ClusterConfig   `json:"cluster"`
	Leader     *Leader         `json:"leader,omitempty"`
	Nodes      []Node          `json:"nodes"`
	Namespaces []NamespaceView `json:"namespaces"`
	Workloads  []Workload      `json:"workloads"`
	Phases     map[string]int  `json:"phases"`
	// Sources are the Git sources with their status.
	Sources []Source `json:"sources"`
	// Backup is the leader's record of its etcd snapshots; nil before the
	// first attempt.
	Backup *BackupStatus `json:"backup,omitempty"`
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
	// Verification and VerifyMessage are the agent's verdict on the
	// updateStrategy.verify command (InstanceStatus.Verification).
	Verification  string `json:"verification,omitempty"`
	VerifyMessage string `json:"verifyMessage,omitempty"`
	// Ready is true when the instance serves: running, healthy (or without
	// a health check) and not leaving. Clients that pick instances from
	// this list use only these.
	Ready bool `json:"ready"`
	// Leaving is true once the leader has taken the instance out of
	// service: it stops after the drain delay.
	Leaving bool `json:"leaving,omitempty"`
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

// SyncResult is the response to a sync request.
type SyncResult struct {
	// Triggered is how many sources were asked to poll now.
	Triggered int `json:"triggered"`
}
