package api

// The API's paths that more than one side names.

// AuditPath is the audit log's endpoint (admin token only).
const AuditPath = "/v1alpha1/audit"

// BackupPath is where katcall backup asks the leader for a snapshot now
// (POST, admin token).
const BackupPath = "/v1alpha1/cluster/backup"

// CACertPath is where the API serves the cluster CA certificate, to anyone:
// a joining node fetches it and checks its fingerprint against the join
// token before it sends the token's secret.
const CACertPath = "/v1alpha1/cluster/ca"

// JoinPath is where a node asks to join.
const JoinPath = "/v1alpha1/join"

// JoinTokenPath is where katcall token rotate asks for a new join token.
const JoinTokenPath = "/v1alpha1/join-token"

// MetricsCertPath is where katcall metrics-cert asks for a metrics
// certificate.
const MetricsCertPath = "/v1alpha1/metrics-certificates"

// Headers of a log's answer (GET .../workloads/{name}/logs): the instance
// whose log it is, and for a build log the node that built it and the
// commit.
const (
	HeaderInstance = "X-Kat-Instance"
	HeaderNode     = "X-Kat-Node"
	HeaderCommit   = "X-Kat-Commit"
)

// IngressPath lists every ingress route (GET, admin token).
const IngressPath = "/v1alpha1/ingress"

// IngressCertificatesPath lists the ingress certificates (GET, admin
// token); IngressCertificatesPath/{kind}/{name} deletes one (DELETE).
const IngressCertificatesPath = "/v1alpha1/ingress/certificates"
