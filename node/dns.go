package node

import (
	"context"
	"net"
	"strconv"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/netstack/dnsserver"
)

// dnsPort is where every node's DNS server listens, on its overlay
// address: the nameserver its containers are given.
const dnsPort = 53

// hostResolvConf lists the resolvers names outside the cluster domain
// are forwarded to.
const hostResolvConf = "/etc/resolv.conf"

// runDNS serves the cluster's names on the node's overlay address once
// the leader has given the node a subnet, until ctx ends: the zone from
// the DNS records in etcd, the namespaces of queries' sources from this
// node's assignments, other names forwarded to the host's resolvers.
func (n *Node) runDNS(ctx context.Context) error {
	log := n.log.With().Str("component", "dns").Logger()
	nn, err := dnsserver.WaitNodeNetwork(ctx, n.st, n.state.NodeName, log)
	if err != nil {
		return nil // ctx ended
	}
	ip := nn.OverlayIP()
	upstreams, err := dnsserver.HostUpstreams(hostResolvConf, ip)
	if err != nil || len(upstreams) == 0 {
		log.Warn().Err(err).Msg("no upstream resolver: names outside the cluster domain will get SERVFAIL")
	}
	src := &dnsserver.SourceMap{}
	h := dnsserver.NewHandler(dnsserver.HandlerConfig{
		Domain: n.state.Cluster.Spec.ClusterDomain, Upstreams: upstreams, Sources: src, Logger: log,
	})
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return dnsserver.FeedZone(gctx, n.st, h, 0, log) })
	g.Go(func() error { return dnsserver.FeedSources(gctx, n.st, n.state.NodeName, src, 0, log) })
	g.Go(func() error {
		return dnsserver.Serve(gctx, net.JoinHostPort(ip.String(), strconv.Itoa(dnsPort)), h, log)
	})
	return g.Wait()
}
