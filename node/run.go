package node

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/reconcile"
)

// Leader leases: a dead leader is replaced about this fast (plus the
// raft election when the etcd leader died with it). A quorum of several
// members gets etcd's shortest lease, so that another member leads within
// about 5 s; a single member, which nobody replaces, the longer one,
// which a process stalled by a busy machine is less likely to lose.
const (
	leaseTTLSeconds       = 5
	quorumLeaseTTLSeconds = 2
)

// quorumElectionMs is the etcd election timeout of a quorum of several
// members (cluster.kat spec.etcdMembers above 1): half etcd's default, so
// that the raft leader's death costs about 1 s of the failover instead of
// 2 s (detection, then every lease extended by as much).
const quorumElectionMs = 500

// leaseCheckInterval is how often the leader checks that its lease still
// suits the etcd quorum's size.
const leaseCheckInterval = 2 * time.Second

// leaseTTL is the leader lease for the etcd quorum as it is now: the short
// one once it has several members.
func (n *Node) leaseTTL(ctx context.Context) int64 {
	if n.etcd == nil || n.state.Cluster.Spec.Members() == 1 {
		return leaseTTLSeconds
	}
	ms, err := n.etcd.Members(ctx)
	if err != nil || len(ms) < 2 {
		return leaseTTLSeconds
	}
	return quorumLeaseTTLSeconds
}

// watchLease is a leader loop: it ends the term (to campaign again with the
// short lease) once a member has joined a quorum the term's lease was
// chosen for alone.
func (n *Node) watchLease(ttl int64) reconcile.Loop {
	return reconcile.Loop{Name: "lease", Run: func(ctx context.Context) error {
		t := time.NewTicker(leaseCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if now := n.leaseTTL(ctx); now != ttl && ctx.Err() == nil {
				return fmt.Errorf("the etcd quorum has other members now: campaigning again with a %d s lease (was %d s)", now, ttl)
			}
		}
	}}
}

// Run runs the node until ctx ends: the agent side (its loop, API and
// heartbeat) and a campaign for leadership, leading while elected. It returns
// nil once everything it started has stopped; containers keep running.
func (n *Node) Run(ctx context.Context) error {
	if n.state.Role != roleWorker {
		// The API listens while the node does not lead too: it forwards
		// to the leader then.
		front, err := newAPIFront(n)
		if err != nil {
			return err
		}
		n.front = front
	}
	g, ctx := errgroup.WithContext(ctx)
	if n.embed != nil {
		defer metrics.SetEtcdStatus(n.etcdStatus)()
		g.Go(func() error {
			select {
			case err := <-n.embed.Err():
				if n.leftQuorum.Load() {
					return nil // it stops as it leaves the quorum
				}
				return fmt.Errorf("embedded etcd failed: %w", err)
			case <-ctx.Done():
				return nil
			}
		})
	}
	if n.opts.PprofAddress != "" {
		g.Go(func() error { return servePprof(ctx, n.opts.PprofAddress) })
	}
	if n.state.Role == roleWorker {
		g.Go(func() error { return n.keepEtcdEndpoints(ctx, endpointsCheckInterval) })
		if n.MayDetach() {
			g.Go(func() error { return n.runDetachable(ctx) })
		} else {
			g.Go(func() error { return n.runAgent(ctx, nil) })
		}
		return n.departedOr(g.Wait()) // a worker is no leader candidate
	}
	// A departing member gives the leadership up before it leaves the
	// etcd quorum (handOverLeadership).
	campaign, stopCampaign := context.WithCancel(ctx)
	defer stopCampaign()
	n.stopCampaign, n.campaignDone = stopCampaign, make(chan struct{})
	g.Go(func() error { return n.runAgent(ctx, nil) })
	if n.state.Role == roleMember {
		// Before it ever leads: the operator sees it as the member joins.
		n.warnMissingClusterFiles("as an etcd member, which may lead")
	}
	g.Go(func() error { return n.front.run(ctx) })
	g.Go(func() error { return n.answerRejoins(ctx) })
	l := &reconcile.Leadership{
		Store: n.st, ID: n.state.NodeName, LeaseTTL: n.leaseTTL, Term: n.leaderTerm,
		Logger: n.log.With().Str("component", "leadership").Logger(),
	}
	g.Go(func() error {
		defer close(n.campaignDone)
		return l.Run(campaign)
	})
	return n.departedOr(g.Wait())
}

// departedOr returns the departure's error once the node departed, whatever
// else stopped as it did (a member's etcd that left the quorum), else err.
func (n *Node) departedOr(err error) error {
	if d := n.depart.departed(); d != nil {
		return d
	}
	return err
}

// etcdStatus is the kat_etcd_ metrics' view of the embedded member.
func (n *Node) etcdStatus() metrics.EtcdStatus {
	s := n.embed.Status()
	return metrics.EtcdStatus{IsLeader: s.IsLeader, HasLeader: s.HasLeader, IsLearner: s.IsLearner,
		DBSizeBytes: s.DBSizeBytes, DBSizeInUseBytes: s.DBSizeInUseBytes, Members: s.Members}
}
