package api

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"kat.dws.rip/kat/pki"
)

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

// CACertPath is where the API serves the cluster CA certificate, to anyone:
// a joining node fetches it and checks its fingerprint against the join
// token before it sends the token's secret.
const CACertPath = "/v1alpha1/cluster/ca"

// JoinPath is where a node asks to join.
const JoinPath = "/v1alpha1/join"

// Join joins the cluster whose API is server (https://host:port) with tok:
// it fetches the CA over an unverified connection, checks it against the
// token's fingerprint (nothing secret is sent before), then sends req with
// the token's secret over a connection verified with that CA.
func Join(ctx context.Context, server string, tok pki.JoinToken, req JoinRequest) (*JoinResponse, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("leader API %q: want https://host:port", server)
	}
	caPEM, err := fetchCA(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, err := pki.VerifyFingerprint(caPEM, tok.CAFingerprint); err != nil {
		return nil, fmt.Errorf("verify the leader at %s: %w", u.Host, err)
	}
	c, err := NewClient(ClientConfig{Server: server, CAData: caPEM, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	req.Secret = tok.Secret
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode join request: %w", err)
	}
	var resp JoinResponse
	if err := c.do(ctx, http.MethodPost, JoinPath, nil, body, "application/json", &resp); err != nil {
		return nil, fmt.Errorf("join the cluster at %s: %w", u.Host, err)
	}
	if resp.CA != string(caPEM) {
		return nil, fmt.Errorf("join the cluster at %s: the CA in the answer is not the one the leader served", u.Host)
	}
	return &resp, nil
}

// fetchCA reads the CA certificate the API serves. The connection is not
// verified (the caller checks the certificate's fingerprint) and carries
// nothing secret.
func fetchCA(ctx context.Context, u *url.URL) ([]byte, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true} //nolint:gosec // checked against the token's fingerprint
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	ca := *u
	ca.Path = strings.TrimSuffix(u.Path, "/") + CACertPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ca.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA from %s: %w", u.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA from %s: %w", u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &Error{StatusCode: resp.StatusCode, Code: CodeUnavailable,
			Message: fmt.Sprintf("fetch the cluster CA from %s: %s: %s", u.Host, resp.Status, strings.TrimSpace(string(b)))}
	}
	return b, nil
}
