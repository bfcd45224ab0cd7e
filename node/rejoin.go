package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"kat.dws.rip/kat/detach/rejoin"
	"kat.dws.rip/kat/store"
)

// askInterval is how often a detached node multicasts its rejoin request,
// and how long it waits for an answer.
const askInterval = 5 * time.Second

// rejoinGroup is the UDP address of rejoin requests, nil when they are off
// (--rejoin-group "").
func (n *Node) rejoinGroup() (*net.UDPAddr, error) {
	if n.opts.RejoinGroup == "" {
		return nil, nil
	}
	a, err := net.ResolveUDPAddr("udp4", n.opts.RejoinGroup)
	if err != nil {
		return nil, fmt.Errorf("--rejoin-group %q: %w", n.opts.RejoinGroup, err)
	}
	return a, nil
}

// answerRejoins answers, while the node runs, the rejoin requests detached
// nodes of its cluster multicast on the LAN (docs/detached.md "Rejoining"):
// with this member's API URL and the etcd client URLs, signed with its
// key. The control plane of a detached node never answers: it is not the
// cluster. A group that cannot be joined is logged, not fatal.
func (n *Node) answerRejoins(ctx context.Context) error {
	group, err := n.rejoinGroup()
	if err != nil || group == nil || n.worker != "" {
		return err
	}
	conn, err := net.ListenMulticastUDP("udp4", nil, group)
	if err != nil {
		n.log.Warn().Err(err).Str("group", group.String()).Msg("not answering detached nodes' rejoin requests")
		return nil
	}
	defer conn.Close()
	signer, err := rejoin.NewSigner(n.leaf)
	if err != nil {
		return err
	}
	v := rejoin.NewVerifier(n.ca.Pool(), n.state.ClusterUID)
	n.log.Info().Str("group", group.String()).Msg("answering detached nodes' rejoin requests")
	return rejoin.Respond(ctx, conn, v, func(r rejoin.Request) ([]byte, error) {
		n.log.Info().Str("node", r.Node).Msg("answering a detached node's rejoin request")
		return signer.Answer(r, rejoin.Answer{Member: n.state.NodeName, APIURL: n.apiURL(), EtcdEndpoints: n.etcdClientURLs(ctx)}, time.Now())
	}, func(err error) { n.log.Debug().Err(err).Msg("rejoin message ignored") })
}

// askRejoin multicasts the detached worker's rejoin request every
// askInterval until ctx ends; an answer's etcd URLs join those the
// worker's etcd client tries, so that the node reaches its cluster even
// where its members moved.
func (n *Node) askRejoin(ctx context.Context) error {
	group, err := n.rejoinGroup()
	if err != nil || group == nil {
		return err
	}
	signer, err := rejoin.NewSigner(n.leaf)
	if err != nil {
		return err
	}
	conn, err := net.ListenPacket("udp4", ":0")
	if err != nil {
		n.log.Warn().Err(err).Msg("not sending rejoin requests")
		return nil
	}
	defer conn.Close()
	v := rejoin.NewVerifier(n.ca.Pool(), n.state.ClusterUID)
	t := time.NewTicker(askInterval)
	defer t.Stop()
	for {
		req, b, err := signer.NewRequest(n.state.ClusterUID, n.state.Cluster.Metadata.Name, n.state.NodeName, time.Now())
		if err != nil {
			return err
		}
		a, err := rejoin.Ask(ctx, conn, group, b, req, v, askInterval)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			n.log.Debug().Err(err).Msg("rejoin request unanswered")
		default:
			n.log.Info().Str("member", a.Member).Str("api", a.APIURL).Strs("etcd", a.EtcdEndpoints).Msg("a member of the cluster answered the rejoin request")
			n.addEtcdEndpoints(a.EtcdEndpoints)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// addEtcdEndpoints adds urls to those the worker's etcd client tries.
func (n *Node) addEtcdEndpoints(urls []string) {
	e, ok := n.st.(*store.Etcd)
	if !ok {
		return
	}
	cur := e.Client().Endpoints()
	next := slices.Clone(cur)
	for _, u := range urls {
		if !slices.Contains(next, u) {
			next = append(next, u)
		}
	}
	if len(next) > len(cur) {
		e.Client().SetEndpoints(next...)
	}
}
