package node

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/reconcile"
)

// leaseTTLSeconds is the leader lease: a dead leader is replaced this fast.
const leaseTTLSeconds = 5

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
	l := &reconcile.Leadership{
		Store: n.st, ID: n.state.NodeName, LeaseTTLSeconds: leaseTTLSeconds, Term: n.leaderTerm,
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
