package api

import "time"

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

// ClusterIdentity is who a cluster is, recorded once by init (kat-agent
// init): its UID, its name (cluster.kat's metadata.name) and when it was
// created.
type ClusterIdentity struct {
	UID       string    `json:"uid"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// ClusterConfig is the cluster's configuration with its identity.
type ClusterConfig struct {
	ClusterIdentity
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
	// Detached is set when the cluster is a node detached from its own
	// (docs/detached.md); nil otherwise.
	Detached *Detached `json:"detached,omitempty"`
}

// Detached is the record of a node that runs detached from its cluster
// (kat-agent join --parent-cluster-name, after nodeLossTimeoutSeconds
// without reaching a member): a cluster of one of its own, whose
// workloads applied meanwhile are pinned to it, until it rejoins.
type Detached struct {
	// Node is the detached node.
	Node string `json:"node"`
	// Since is when it detached.
	Since time.Time `json:"since"`
	// ParentCluster and ParentClusterUID name the cluster it left.
	ParentCluster    string `json:"parentCluster"`
	ParentClusterUID string `json:"parentClusterUID"`
	// Seeded are the workloads the node ran as it detached
	// ("namespace/name"): the cluster's, not handed back as it rejoins.
	Seeded []string `json:"seeded,omitempty"`
	// LeftRunning are the instances of the cluster's Jobs the node ran as
	// it detached: they run to their end, left alone by the node's own
	// control plane, and the node reports how they ended once it rejoins.
	LeftRunning []string `json:"leftRunning,omitempty"`
	// HeldSlots are the user-namespace slots of those Job instances: the
	// plane gives them to no workload of its own, so that the cluster can
	// adopt what the node hands back as it rejoins.
	HeldSlots []int `json:"heldSlots,omitempty"`
	// LastRejoinAttempt and RejoinError are the last failed attempt to
	// rejoin: when, and why it failed; empty before the first.
	LastRejoinAttempt time.Time `json:"lastRejoinAttempt,omitzero"`
	RejoinError       string    `json:"rejoinError,omitempty"`
	// StartFailures counts the attempts to start the node's control plane
	// that failed before this one (each retried after a back-off), and
	// LastStartError is the last one's error; 0 and "" when it started at
	// once.
	StartFailures  int    `json:"startFailures,omitempty"`
	LastStartError string `json:"lastStartError,omitempty"`
}
