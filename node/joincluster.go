package node

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
)

// joinTimeout bounds the exchange with the leader when a node joins.
const joinTimeout = time.Minute

// joinCluster is a joining node's side: it makes a key, asks the leader at
// o.LeaderAPI to admit it with the token of o.TokenFile, and returns the
// node's state, its PKI files written. The node's UID and key are saved
// before the leader is asked, so a join cut short is retried as the same
// node.
func joinCluster(ctx context.Context, o *Options, d dataDir, st *nodeState) (*nodeState, error) {
	if o.TokenFile == "" {
		return nil, errors.New("--token-file: required to join (a copy of the leader's DATA_DIR/join.token)")
	}
	b, err := os.ReadFile(o.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("--token-file: %w", err)
	}
	tok, err := pki.ParseJoinToken(string(b))
	if err != nil {
		return nil, fmt.Errorf("--token-file %s: %w", o.TokenFile, err)
	}
	adminToken := ""
	if o.EtcdPeer {
		if o.AdminTokenFile == "" {
			return nil, errors.New("--admin-token-file: required with --etcd-peer (a copy of the leader's DATA_DIR/admin.token: a member receives the cluster's CA key and tokens)")
		}
		b, err := os.ReadFile(o.AdminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		if adminToken = strings.TrimSpace(string(b)); adminToken == "" {
			return nil, fmt.Errorf("--admin-token-file %s: empty", o.AdminTokenFile)
		}
	}
	if st == nil {
		st = &nodeState{NodeName: defaultNodeName(), NodeUID: uuid.NewString(), AdvertiseAddress: defaultAdvertiseAddress(), Role: roleWorker}
		st.Cluster.Spec.AgentPort = quadlet.DefaultAgentPort
	}
	st.applyOptions(o)
	if err := os.MkdirAll(d.pkiDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	node := pki.PathsIn(d.pkiDir(), "node")
	keyPEM, err := os.ReadFile(node.Key)
	if errors.Is(err, os.ErrNotExist) {
		if keyPEM, err = pki.NewKeyPEM(); err != nil {
			return nil, err
		}
		if err := pki.WriteFileAtomic(node.Key, keyPEM, 0o600); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("read node key: %w", err)
	}
	csr, err := pki.CSRForKey(keyPEM, &x509.CertificateRequest{Subject: pkix.Name{CommonName: st.NodeName}})
	if err != nil {
		return nil, err
	}
	wgKey, err := netstack.LoadOrCreateKey(d.wgKey())
	if err != nil {
		return nil, err
	}
	overlay := overlayReport(st, wgKey)
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	req := api.JoinRequest{
		NodeName: st.NodeName, NodeUID: st.NodeUID, CSR: string(csr), AdvertiseAddress: st.AdvertiseAddress,
		AgentPort: st.Cluster.Spec.AgentPort, Labels: st.Labels, EtcdPeer: o.EtcdPeer, AdminToken: adminToken,
		ParentClusterName: o.ParentClusterName,
	}
	if overlay != nil {
		req.WireGuardPublicKey, req.WireGuardPort = overlay.PublicKey, overlay.Port
	}
	resp, err := joinRetrying(ctx, "https://"+o.LeaderAPI, tok, req)
	if err != nil {
		return nil, err
	}
	if o.ParentClusterName != "" && resp.Cluster.Name != o.ParentClusterName {
		// A leader that predates the check admitted the node.
		return nil, fmt.Errorf("--parent-cluster-name: the leader at %s leads cluster %q, not %q", o.LeaderAPI, resp.Cluster.Name, o.ParentClusterName)
	}
	spec, err := json.Marshal(resp.Cluster.Spec)
	if err != nil {
		return nil, fmt.Errorf("encode the cluster spec: %w", err)
	}
	agentPort := st.Cluster.Spec.AgentPort
	st.Cluster = quadlet.ClusterConfiguration{APIVersion: quadlet.APIVersion, Kind: quadlet.KindClusterConfiguration}
	st.Cluster.Metadata.Name = resp.Cluster.Name
	if err := json.Unmarshal(spec, &st.Cluster.Spec); err != nil {
		return nil, fmt.Errorf("decode the cluster spec the leader sent: %w", err)
	}
	st.Cluster.Spec.AgentPort = agentPort
	st.ClusterUID, st.EtcdEndpoints, st.Joined = resp.Cluster.UID, resp.EtcdEndpoints, true
	ca := pki.PathsIn(d.pkiDir(), "ca")
	if err := pki.WriteFileAtomic(ca.Cert, []byte(resp.CA), 0o644); err != nil {
		return nil, err
	}
	if m := resp.Member; m != nil {
		if err := saveMemberSecrets(d, m); err != nil {
			return nil, err
		}
		// A member runs the embedded etcd: EtcdEndpoints would name an
		// external one.
		st.Role, st.InitialCluster, st.MemberID = roleMember, m.InitialCluster, m.MemberID
		st.MemberClientURLs, st.EtcdEndpoints = resp.EtcdEndpoints, nil
	} else if o.EtcdPeer {
		return nil, errors.New("join --etcd-peer: the leader admitted the node as a worker (it runs a version without etcd membership)")
	}
	if err := pki.WriteFileAtomic(node.Cert, []byte(resp.Certificate), 0o644); err != nil {
		return nil, err
	}
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	return st, nil
}

// saveMemberSecrets writes what the leader handed a joining etcd member:
// the CA key, the admin token and the join token.
func saveMemberSecrets(d dataDir, m *api.JoinMember) error {
	for _, f := range []struct{ path, content string }{
		{pki.PathsIn(d.pkiDir(), "ca").Key, m.CAKey}, {d.adminToken(), m.AdminToken + "\n"}, {d.joinToken(), m.JoinToken + "\n"},
	} {
		if strings.TrimSpace(f.content) == "" {
			return fmt.Errorf("join --etcd-peer: the leader sent no content for %s", f.path)
		}
		if err := pki.WriteFileAtomic(f.path, []byte(f.content), 0o600); err != nil {
			return fmt.Errorf("save what the leader handed the etcd member: %w", err)
		}
	}
	return nil
}

// joinRetryDelay is the pause before a join answered "no leader now" is
// sent again.
const joinRetryDelay = time.Second

// joinRetrying sends the join until it is answered, retrying while the
// API answers a server error (an election is under way, the member asked
// forwards to a leader that just died, or the leader's term ended during
// the join), until ctx ends. A join is safe to repeat: the leader admits
// the same node (UID) again, and an etcd member it added already is kept.
func joinRetrying(ctx context.Context, server string, tok pki.JoinToken, req api.JoinRequest) (*api.JoinResponse, error) {
	for {
		resp, err := apiclient.Join(ctx, server, tok, req)
		var apiErr *api.Error
		if err == nil || !errors.As(err, &apiErr) || apiErr.StatusCode < http.StatusInternalServerError {
			return resp, err
		}
		t := time.NewTimer(joinRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}
