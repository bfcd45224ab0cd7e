package node

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// rootClient connects the leader to its embedded etcd as the etcd user
// store.RootUser: with a certificate of the cluster CA whose common name is
// "root", issued once and kept in pki/etcd-root.{crt,key} (the leader holds
// the CA key, so a lost one is issued again). The connection goes to the
// loopback client URL.
func (n *Node) rootClient(ctx context.Context) (*store.Etcd, error) {
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.state.Cluster.Spec.EtcdClientPort))
	st, leaf, err := n.dialRoot(ctx, []string{url})
	if err != nil {
		return nil, err
	}
	// Its reads, writes and watches (the leader's loops and API, every
	// heartbeat) call the member in process, as the same user.
	if err := n.embed.ServeInProcess(st.Client(), leaf.CertPEM); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// rootClientOf connects to the etcd client URLs urls as store.RootUser.
func (n *Node) rootClientOf(ctx context.Context, urls []string) (*store.Etcd, error) {
	st, _, err := n.dialRoot(ctx, urls)
	return st, err
}

// dialRoot connects to the etcd client URLs urls as store.RootUser, with
// the certificate it returns.
func (n *Node) dialRoot(ctx context.Context, urls []string) (*store.Etcd, *pki.Leaf, error) {
	leaf, issued, err := pki.EnsureLeaf(pki.PathsIn(n.dir.pkiDir(), "etcd-root"), n.ca, pki.LeafRequest{CommonName: store.RootUser})
	if err != nil {
		return nil, nil, fmt.Errorf("issue the etcd administrator certificate: %w", err)
	}
	if issued {
		n.log.Info().Msg("issued the etcd administrator certificate")
	}
	tlsCfg, err := pki.ClientTLSConfig(n.ca.Pool(), leaf)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: urls, TLS: tlsCfg})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to the embedded etcd as its administrator: %w", err)
	}
	return st, leaf, nil
}

// ensureAccess gives every registered node, and this one, its etcd user
// with resources.WorkerGrants, then turns etcd authentication on. It runs
// at every start of a node whose etcd is embedded, so a cluster made
// before authentication existed (or a node whose user is missing) is
// brought up to date; a node deleted from the cluster has no registration
// and gets no user.
func (n *Node) ensureAccess(ctx context.Context) error {
	nodes, err := n.repo.ListNodes(ctx)
	if err != nil {
		return fmt.Errorf("set up etcd access: %w", err)
	}
	names := []string{n.state.NodeName}
	for _, nd := range nodes {
		if nd.Registration.Name != n.state.NodeName {
			names = append(names, nd.Registration.Name)
		}
	}
	for _, name := range names {
		if err := n.grantNode(ctx, name); err != nil {
			return err
		}
	}
	if err := n.etcd.EnableAuth(ctx); err != nil {
		return fmt.Errorf("set up etcd access: %w", err)
	}
	return nil
}

// grantNode makes node name an etcd user with a worker's rights. Without
// an embedded etcd (the operator's external etcd manages its own users)
// it does nothing.
func (n *Node) grantNode(ctx context.Context, name string) error {
	if n.etcd == nil {
		return nil
	}
	if err := n.etcd.EnsureUser(ctx, name, resources.WorkerGrants(name)); err != nil {
		return fmt.Errorf("give node %q its etcd access: %w", name, err)
	}
	return nil
}

// collectNode deletes node name with everything it held, as katcall node
// delete does: its etcd membership and user (ForgetNode), then its records
// (resources.Repo.DeleteNode). The leader collects a node NotReady for long
// with it.
func (n *Node) collectNode(ctx context.Context, name string) error {
	if err := n.ForgetNode(ctx, name); err != nil {
		return err
	}
	return n.repo.DeleteNode(ctx, name)
}

// ForgetNode removes node name from the etcd quorum when it is a member,
// then its etcd user: the node's open connections lose their rights at
// their next request and it cannot connect again. The API's delete-node
// route calls it before it deletes the node's records. Without an
// embedded etcd it does nothing.
func (n *Node) ForgetNode(ctx context.Context, name string) error {
	if n.etcd == nil {
		return nil
	}
	if name == n.state.NodeName {
		return fmt.Errorf("forget node %q: it is this node", name)
	}
	peerURL := ""
	if reg, err := n.repo.GetNodeRegistration(ctx, name); err == nil {
		peerURL = "https://" + net.JoinHostPort(reg.AdvertiseAddress, strconv.Itoa(n.state.Cluster.Spec.EtcdPeerPort))
	}
	removed, err := n.etcd.RemoveMember(ctx, name, peerURL)
	if err != nil {
		return fmt.Errorf("forget node %q: %w", name, err)
	}
	if removed {
		n.log.Info().Str("node", name).Msg("removed the node from the etcd quorum")
	}
	if err := n.etcd.RemoveUser(ctx, name); err != nil {
		return fmt.Errorf("forget node %q: %w", name, err)
	}
	return nil
}

// peerCommonName is the common name of the etcd peer certificate every
// member holds (pki/etcd-peer.{crt,key}): the peer URLs admit only it, so
// a worker's certificate of the same CA cannot act as a peer. It is no DNS
// label, so no node can be named so.
const peerCommonName = "etcd-peer.kat"

// peerTLS issues (once; a member holds the CA key) this member's etcd peer
// certificate, for its advertise address and loopback, and returns the
// peer side's TLS files.
func (n *Node) peerTLS() (*store.TLSFiles, error) {
	req := nodeLeafRequest(n.state.NodeName, n.state.AdvertiseAddress)
	req.CommonName = peerCommonName
	paths := pki.PathsIn(n.dir.pkiDir(), "etcd-peer")
	if _, issued, err := pki.EnsureLeaf(paths, n.ca, req); err != nil {
		return nil, fmt.Errorf("issue the etcd peer certificate: %w", err)
	} else if issued {
		n.log.Info().Msg("issued the etcd peer certificate")
	}
	return &store.TLSFiles{
		CertFile: paths.Cert, KeyFile: paths.Key, TrustedCAFile: pki.PathsIn(n.dir.pkiDir(), "ca").Cert,
		AllowedCNs: []string{peerCommonName},
	}, nil
}

// promoteTimeout bounds a joined member's wait to be promoted from learner
// to voter.
const promoteTimeout = 2 * time.Minute

// promoteSelf makes this member, a learner since it joined, a voting
// member: it asks the members it joined through (a learner answers no
// client request itself) and records the promotion.
func (n *Node) promoteSelf(ctx context.Context) error {
	id, err := strconv.ParseUint(n.state.MemberID, 16, 64)
	if err != nil {
		return fmt.Errorf("etcd member ID %q in %s: %w", n.state.MemberID, n.dir.stateFile(), err)
	}
	cli, err := n.rootClientOf(ctx, n.state.MemberClientURLs)
	if err != nil {
		return err
	}
	defer cli.Close()
	pctx, cancel := context.WithTimeout(ctx, promoteTimeout)
	defer cancel()
	if err := cli.PromoteMember(pctx, id); err != nil {
		return fmt.Errorf("join the etcd quorum: %w", err)
	}
	// The promotion is committed; this member serves clients once it has
	// applied it too.
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for n.embed.Status().IsLearner {
		select {
		case <-pctx.Done():
			return fmt.Errorf("join the etcd quorum: wait until this member applies its promotion: %w", pctx.Err())
		case <-t.C:
		}
	}
	n.state.Promoted = true
	if err := saveNodeState(n.dir, n.state); err != nil {
		return err
	}
	n.log.Info().Str("member_id", n.state.MemberID).Msg("promoted to a voting etcd member")
	return nil
}
