package node

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// roleWorker marks the state of a node that joined a cluster: it runs an
// agent, not an etcd member nor a leader candidate.
const roleWorker = "worker"

// roleMember marks the state of a node that joined a cluster's etcd
// quorum (join --etcd-peer): it runs an etcd member, campaigns for the
// leadership and serves the API (forwarding to the leader while it does
// not lead).
const roleMember = "member"

// memberSyncInterval is how often etcd clients of other members' URLs
// refresh them from the member list.
const memberSyncInterval = 30 * time.Second

// endpointsCheckInterval is how often a worker compares the etcd URLs its
// client knows with those node.json holds.
const endpointsCheckInterval = 10 * time.Second

// joinTimeout bounds the exchange with the leader when a node joins.
const joinTimeout = time.Minute

// ensureJoinToken returns the join secret and makes sure the token file
// holds the whole token (secret and CA fingerprint), as `kat-agent join
// --token-file` reads it. A file from before tokens carried the fingerprint
// (the bare secret) is rewritten.
func ensureJoinToken(path string, ca *pki.CA) (string, error) {
	held, err := ensureToken(path)
	if err != nil {
		return "", err
	}
	secret := held
	if tok, err := pki.ParseJoinToken(held); err == nil {
		secret = tok.Secret
	}
	want := pki.JoinToken{Secret: secret, CAFingerprint: pki.Fingerprint(ca.Cert)}.String()
	if held == want {
		return secret, nil
	}
	if err := pki.WriteFileAtomic(path, []byte(want+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write join token: %w", err)
	}
	return secret, nil
}

// rotateJoinToken issues a new join secret with the cluster CA's
// fingerprint (apiserver.Config.RotateJoinToken): it rewrites
// DATA_DIR/join.token, then stores the secret's hash, from which moment only
// the new token admits nodes. When the hash cannot be stored, the old file
// is put back and the old token stays valid.
func (n *Node) rotateJoinToken(ctx context.Context) (string, error) {
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	secret, err := newSecret()
	if err != nil {
		return "", err
	}
	tok := pki.JoinToken{Secret: secret, CAFingerprint: pki.Fingerprint(n.ca.Cert)}.String()
	path := n.dir.joinToken()
	old, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the current join token: %w", err)
	}
	if err := pki.WriteFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the new join token: %w", err)
	}
	// Sealed with the CA key, so that whichever member leads later can
	// bring its DATA_DIR/join.token up to date (syncJoinToken).
	sealed, err := n.ca.Seal(joinTokenSealPurpose, []byte(tok))
	if err != nil {
		return "", err
	}
	if err := n.repo.SetJoinToken(ctx, secret, sealed); err != nil {
		if rerr := pki.WriteFileAtomic(path, old, 0o600); rerr != nil {
			return "", fmt.Errorf("%w (and putting back %s failed: %w)", err, path, rerr)
		}
		return "", err
	}
	n.log.Info().Str("token_file", path).Msg("join token rotated")
	return tok, nil
}

// joinTokenSealPurpose names the join token's sealed copy in etcd.
const joinTokenSealPurpose = "join token"

// syncJoinToken rewrites DATA_DIR/join.token with the join token the last
// rotation sealed in etcd when the file holds another (the token was
// rotated while another member led), so that the file of the node that
// leads is always the token that admits nodes. Without a sealed copy (no
// rotation since init, whose token every member received as it joined) it
// does nothing.
func (n *Node) syncJoinToken(ctx context.Context) error {
	sealed, hash, err := n.repo.SealedJoinToken(ctx)
	if errors.Is(err, resources.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	plain, err := n.ca.Open(joinTokenSealPurpose, sealed)
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	tok, err := pki.ParseJoinToken(string(plain))
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	if !resources.TokenMatches(hash, tok.Secret) {
		return errors.New("the join token rotated last does not match the stored hash: keeping DATA_DIR/join.token")
	}
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	path := n.dir.joinToken()
	if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == tok.String() {
		return nil
	}
	if err := pki.WriteFileAtomic(path, []byte(tok.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the join token rotated last: %w", err)
	}
	n.log.Info().Str("token_file", path).Msg("join token file brought up to date: the token was rotated while another member led")
	return nil
}

// admit is the leader's side of a join (apiserver.Joiner): it registers the
// node, gives it its etcd user (a worker's read-only rights, see
// resources.WorkerGrants) and signs its certificate, whose names (CN =
// node name, its address) the leader sets, never the request.
func (n *Node) admit(ctx context.Context, req api.JoinRequest) (*api.JoinResponse, error) {
	spec := n.state.Cluster.Spec
	peerURL := "https://" + net.JoinHostPort(req.AdvertiseAddress, strconv.Itoa(spec.EtcdPeerPort))
	if req.EtcdPeer {
		if err := n.checkMemberRoom(ctx, req.NodeName, peerURL); err != nil {
			return nil, err
		}
	}
	certPEM, err := n.ca.SignCSR([]byte(req.CSR), nodeLeafRequest(req.NodeName, req.AdvertiseAddress))
	if err != nil {
		return nil, fmt.Errorf("sign the certificate of node %q: %w", req.NodeName, err)
	}
	reg := api.NodeRegistration{
		Name: req.NodeName, UID: req.NodeUID, AdvertiseAddress: req.AdvertiseAddress,
		AgentPort: req.AgentPort, Labels: nodeLabels(req.NodeName, req.Labels), JoinedAt: time.Now().UTC(),
		EtcdMember: req.EtcdPeer,
	}
	if req.EtcdPeer {
		reg.APIPort = spec.APIPort
	}
	if err := n.repo.RegisterJoiningNode(ctx, reg); err != nil {
		if errors.Is(err, resources.ErrNodeNameTaken) {
			return nil, fmt.Errorf("%w: %w", apiserver.ErrNodeNameTaken, err)
		}
		return nil, err
	}
	if err := n.grantNode(ctx, req.NodeName); err != nil {
		return nil, err
	}
	var overlay *api.NodeOverlay
	if req.WireGuardPublicKey != "" {
		overlay = &api.NodeOverlay{PublicKey: req.WireGuardPublicKey, Port: req.WireGuardPort}
	}
	if err := n.ensureNodeNetwork(ctx, req.NodeName, req.AdvertiseAddress, overlay); err != nil {
		return nil, err
	}
	resp := &api.JoinResponse{Certificate: string(certPEM), CA: string(n.ca.CertPEM), EtcdEndpoints: n.etcdClientURLs(ctx)}
	if req.EtcdPeer {
		if resp.Member, err = n.addMember(ctx, req.NodeName, peerURL); err != nil {
			return nil, err
		}
		// katcall on this node may fail over to the new member too.
		if err := n.writeOwnKatcallConfig(ctx); err != nil {
			n.log.Warn().Err(err).Msg("katcall.yaml does not list the new member")
		}
	}
	return resp, nil
}

// checkMemberRoom refuses (409) an --etcd-peer join the etcd quorum has no
// room for, before anything is written: an external etcd, a full quorum
// (cluster.kat spec.etcdMembers) or another member still joining.
func (n *Node) checkMemberRoom(ctx context.Context, name, peerURL string) error {
	if n.etcd == nil || n.embed == nil {
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict,
			Message: "join --etcd-peer: this cluster's etcd is external (--etcd-endpoints): its members are managed outside KAT; join without --etcd-peer"}
	}
	err := n.etcd.CheckRoom(ctx, name, peerURL, n.state.Cluster.Spec.Members())
	switch {
	case errors.Is(err, store.ErrQuorumFull):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"join --etcd-peer: cluster.kat spec.etcdMembers is %d and %v: join without --etcd-peer, or delete a member first (katcall delete node)",
			n.state.Cluster.Spec.Members(), err)}
	case errors.Is(err, store.ErrMemberJoining):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"join --etcd-peer: %v: members join one at a time; retry once it runs (or delete it if it never will)", err)}
	case errors.Is(err, store.ErrInvalidArgument):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: "join --etcd-peer: " + err.Error()}
	}
	return err
}

// addMember adds node name's etcd member as a learner (it promotes itself
// once it runs) and returns what the member needs: the initial cluster,
// the CA key, the admin and join tokens.
func (n *Node) addMember(ctx context.Context, name, peerURL string) (*api.JoinMember, error) {
	caKey, err := os.ReadFile(pki.PathsIn(n.dir.pkiDir(), "ca").Key)
	if err != nil {
		return nil, fmt.Errorf("read the CA key for etcd member %s: %w", name, err)
	}
	joinTok, err := os.ReadFile(n.dir.joinToken())
	if err != nil {
		return nil, fmt.Errorf("read the join token for etcd member %s: %w", name, err)
	}
	id, initial, err := n.etcd.AddLearner(ctx, name, peerURL, n.state.Cluster.Spec.Members())
	if err != nil {
		return nil, err
	}
	n.log.Info().Str("node", name).Str("peer_url", peerURL).Str("member_id", strconv.FormatUint(id, 16)).Msg("added an etcd learner")
	return &api.JoinMember{
		MemberID: strconv.FormatUint(id, 16), InitialCluster: initial, CAKey: string(caKey),
		AdminToken: n.admin, JoinToken: strings.TrimSpace(string(joinTok)),
	}, nil
}

// nodeLeafRequest names a node's certificate: CN and DNS name the node's
// name, IPs loopback and its advertise address. The leader issues its own
// and joining nodes' certificates with it, so a node never names itself.
func nodeLeafRequest(name, advertiseAddress string) pki.LeafRequest {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(advertiseAddress); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	return pki.LeafRequest{CommonName: name, DNSNames: []string{name, "localhost"}, IPs: ips}
}

// nodeLabels are a node's registered labels: kat.dws.rip/nodeName and the
// ones it was given.
func nodeLabels(name string, given map[string]string) map[string]string {
	labels := map[string]string{resources.NodeNameLabel: name}
	maps.Copy(labels, given)
	return labels
}

// etcdClientURLs are the etcd URLs other nodes reach: every embedded
// member's advertised client URL (this node's first), or the external
// etcd's endpoints.
func (n *Node) etcdClientURLs(ctx context.Context) []string {
	if len(n.state.EtcdEndpoints) > 0 {
		return n.state.EtcdEndpoints
	}
	port := strconv.Itoa(n.state.Cluster.Spec.EtcdClientPort)
	urls := []string{"https://" + net.JoinHostPort(n.state.AdvertiseAddress, port)}
	if n.etcd == nil {
		return urls
	}
	ms, err := n.etcd.Members(ctx)
	if err != nil {
		n.log.Warn().Err(err).Msg("list etcd members for a joining node: it gets this member's URL only")
		return urls
	}
	for _, m := range ms {
		for _, u := range m.ClientURLs {
			if !slices.Contains(urls, u) {
				urls = append(urls, u)
			}
		}
	}
	return urls
}

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
		AgentPort: st.Cluster.Spec.AgentPort, Labels: o.NodeLabels, EtcdPeer: o.EtcdPeer, AdminToken: adminToken,
	}
	if overlay != nil {
		req.WireGuardPublicKey, req.WireGuardPort = overlay.PublicKey, overlay.Port
	}
	resp, err := joinRetrying(ctx, "https://"+o.LeaderAPI, tok, req)
	if err != nil {
		return nil, err
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

// loadWorkerPKI reads a joined node's CA certificate (it has no CA key) and
// its own certificate.
func (n *Node) loadWorkerPKI() error {
	caPaths, nodePaths := pki.PathsIn(n.dir.pkiDir(), "ca"), pki.PathsIn(n.dir.pkiDir(), "node")
	caPEM, err := os.ReadFile(caPaths.Cert)
	if err != nil {
		return fmt.Errorf("read the cluster CA: %w", err)
	}
	caCert, err := pki.ParseCertificate(caPEM)
	if err != nil {
		return fmt.Errorf("read the cluster CA %s: %w", caPaths.Cert, err)
	}
	certPEM, err := os.ReadFile(nodePaths.Cert)
	if err != nil {
		return fmt.Errorf("read the node certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(nodePaths.Key)
	if err != nil {
		return fmt.Errorf("read the node key: %w", err)
	}
	n.ca, n.leaf = &pki.CA{Cert: caCert, CertPEM: caPEM}, &pki.Leaf{CertPEM: certPEM, KeyPEM: keyPEM}
	return nil
}
