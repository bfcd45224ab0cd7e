package api

// JoinRequest is the body of POST /v1alpha1/join: a node asking to join.
type JoinRequest struct {
	// Secret is the join token's secret part.
	Secret string `json:"secret"`
	// NodeName is the name the node asks for; the certificate's CN.
	NodeName string `json:"nodeName"`
	// NodeUID identifies the joining node's data directory: a name held by
	// a node of another UID is refused, so two machines cannot share one.
	NodeUID string `json:"nodeUID"`
	// CSR is the PEM certificate request of the node's key.
	CSR string `json:"csr"`
	// AdvertiseAddress is the IP the cluster reaches the node on.
	AdvertiseAddress string `json:"advertiseAddress"`
	// AgentPort is the port of the node's agent API.
	AgentPort int `json:"agentPort"`
	// Labels are the node's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// WireGuardPublicKey is the base64 public key of the node's overlay
	// device; empty when the node runs no overlay.
	WireGuardPublicKey string `json:"wireGuardPublicKey,omitempty"`
	// WireGuardPort is the UDP port the node's overlay device listens on,
	// at its advertise address; required with WireGuardPublicKey.
	WireGuardPort int `json:"wireGuardPort,omitempty"`
	// EtcdPeer asks to join the embedded etcd quorum (kat-agent join
	// --etcd-peer), at https://AdvertiseAddress:etcdPeerPort (cluster.kat's
	// port); refused (409) when the quorum has spec.etcdMembers members
	// already.
	EtcdPeer bool `json:"etcdPeer,omitempty"`
	// AdminToken is the cluster's admin token, required with EtcdPeer: a
	// member receives the CA key and the tokens, so the join token alone
	// does not make one.
	AdminToken string `json:"adminToken,omitempty"`
	// ParentClusterName is the name of the cluster the node means to join
	// (kat-agent join --parent-cluster-name): a leader of a cluster of
	// another name refuses the join (409) before it writes anything.
	ParentClusterName string `json:"parentClusterName,omitempty"`
}

// JoinResponse is the leader's answer to a join: the node's certificate and
// what the node needs before it can reach etcd.
type JoinResponse struct {
	// Certificate is the PEM node certificate (CN = node name) the CA
	// signed for the request's key.
	Certificate string `json:"certificate"`
	// CA is the PEM cluster CA certificate.
	CA string `json:"ca"`
	// Cluster is the cluster's configuration.
	Cluster ClusterConfig `json:"cluster"`
	// EtcdEndpoints are the etcd client URLs the node connects to with its
	// certificate.
	EtcdEndpoints []string `json:"etcdEndpoints"`
	// Member is set for a node admitted to the etcd quorum (EtcdPeer): what
	// it needs to start its etcd member and to lead.
	Member *JoinMember `json:"member,omitempty"`
}

// JoinMember is what the leader hands a node joining the etcd quorum over
// the join's verified connection: the cluster's secrets a member holds.
type JoinMember struct {
	// MemberID is the node's etcd member ID, in hex.
	MemberID string `json:"memberID"`
	// InitialCluster is etcd's initial cluster of the member:
	// "name=peerURL,..." of every member, the node included.
	InitialCluster string `json:"initialCluster"`
	// CAKey is the cluster CA's PEM private key: a member signs the
	// certificates of nodes that join while it leads.
	CAKey string `json:"caKey"`
	// AdminToken is the cluster's admin token, for the katcall.yaml a
	// member writes.
	AdminToken string `json:"adminToken"`
	// JoinToken is the join token (as join.token holds it), for the
	// member's own join.token.
	JoinToken string `json:"joinToken"`
}
