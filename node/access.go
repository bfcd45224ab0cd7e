package node

import (
	"context"
	"fmt"
	"net"
	"strconv"

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
	leaf, issued, err := pki.EnsureLeaf(pki.PathsIn(n.dir.pkiDir(), "etcd-root"), n.ca, pki.LeafRequest{CommonName: store.RootUser})
	if err != nil {
		return nil, fmt.Errorf("issue the etcd administrator certificate: %w", err)
	}
	if issued {
		n.log.Info().Msg("issued the etcd administrator certificate")
	}
	tlsCfg, err := pki.ClientTLSConfig(n.ca.Pool(), leaf)
	if err != nil {
		return nil, err
	}
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n.state.Cluster.Spec.EtcdClientPort))
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{url}, TLS: tlsCfg})
	if err != nil {
		return nil, fmt.Errorf("connect to the embedded etcd as its administrator: %w", err)
	}
	return st, nil
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

// ForgetNode removes node name's etcd user: the node's open connections
// lose their rights at their next request and it cannot connect again. The
// API's delete-node route calls it after the node's records are deleted.
// Without an embedded etcd it does nothing.
func (n *Node) ForgetNode(ctx context.Context, name string) error {
	if n.etcd == nil {
		return nil
	}
	if err := n.etcd.RemoveUser(ctx, name); err != nil {
		return fmt.Errorf("forget node %q: %w", name, err)
	}
	return nil
}
