package node

import (
	"context"
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

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

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
		EtcdMember: req.EtcdPeer, MayDetach: req.ParentClusterName != "" && !req.EtcdPeer,
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
	ev := api.Event{Type: api.EventNormal, Object: "node/" + req.NodeName, Reason: EventNodeJoined,
		Message: fmt.Sprintf("node %s joined from %s", req.NodeName, req.AdvertiseAddress)}
	if err := n.repo.AppendEvent(ctx, ev); err != nil {
		n.log.Warn().Err(err).Str("node", req.NodeName).Msg("cannot record the join's event")
	}
	return resp, nil
}

// EventNodeJoined is the reason of the event of a node's join.
const EventNodeJoined = "NodeJoined"

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
