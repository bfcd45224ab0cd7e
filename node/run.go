package node

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/reconcile"
)

// Leader leases: a dead leader is replaced about this fast (plus the
// raft election when the etcd leader died with it). A quorum of several
// members gets etcd's shortest lease, so that another member leads within
// about 5 s; a single member, which nobody replaces, the longer one,
// which a stalled process is less likely to lose.
const (
	leaseTTLSeconds       = 5
	quorumLeaseTTLSeconds = 2
)

// quorumElectionMs is the etcd election timeout of a quorum of several
// members: half etcd's default, so that the raft leader's death costs
// about 1 s of the failover instead of 2 s (detection, then every lease
// extended by as much).
const quorumElectionMs = 500

// leaseTTL is the leader lease of this node's cluster.
func (n *Node) leaseTTL() int64 {
	if n.state.Cluster.Spec.Members() > 1 {
		return quorumLeaseTTLSeconds
	}
	return leaseTTLSeconds
}

// Run runs the node until ctx ends: the agent side (its loop, API and
// heartbeat) and a campaign for leadership, leading while elected. It returns
// nil once everything it started has stopped; containers keep running.
func (n *Node) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if n.embed != nil {
		defer metrics.SetEtcdStatus(n.etcdStatus)()
		g.Go(func() error {
			select {
			case err := <-n.embed.Err():
				return fmt.Errorf("embedded etcd failed: %w", err)
			case <-ctx.Done():
				return nil
			}
		})
	}
	if n.opts.PprofAddress != "" {
		g.Go(func() error { return servePprof(ctx, n.opts.PprofAddress) })
	}
	g.Go(func() error { return n.runAgent(ctx) })
	if n.state.Role == roleWorker {
		return g.Wait() // a worker is no leader candidate
	}
	// The API listens while the node does not lead too: it forwards to
	// the leader then.
	n.front = newAPIFront(n)
	g.Go(func() error { return n.front.run(ctx) })
	l := &reconcile.Leadership{
		Store: n.st, ID: n.state.NodeName, LeaseTTLSeconds: n.leaseTTL(), Term: n.leaderTerm,
		Logger: n.log.With().Str("component", "leadership").Logger(),
	}
	g.Go(func() error { return l.Run(ctx) })
	return g.Wait()
}

// etcdStatus is the kat_etcd_ metrics' view of the embedded member.
func (n *Node) etcdStatus() metrics.EtcdStatus {
	s := n.embed.Status()
	return metrics.EtcdStatus{IsLeader: s.IsLeader, HasLeader: s.HasLeader, IsLearner: s.IsLearner,
		DBSizeBytes: s.DBSizeBytes, DBSizeInUseBytes: s.DBSizeInUseBytes, Members: s.Members}
}
