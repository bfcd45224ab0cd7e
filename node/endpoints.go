package node

import (
	"context"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/store"
)

// keepEtcdEndpoints records in node.json the etcd client URLs that the
// worker's client knows, which it syncs from the member list (at start and
// every memberSyncInterval), whenever they change; it returns when ctx
// ends. A worker that joined while the cluster had one member so reaches
// the others after a restart while that one is down.
func (n *Node) keepEtcdEndpoints(ctx context.Context, every time.Duration) error {
	e, ok := n.st.(*store.Etcd)
	if !ok {
		return nil
	}
	return recordEndpoints(ctx, e.Client(), n.state.EtcdEndpoints, every, func(eps []string) error {
		st := *n.state // node.json's other fields are those of Open
		st.EtcdEndpoints = eps
		if err := saveNodeState(n.dir, &st); err != nil {
			n.log.Warn().Err(err).Strs("endpoints", eps).Msg("cannot record the etcd members' client URLs in node.json")
			return err
		}
		n.log.Info().Strs("endpoints", eps).Msg("recorded the etcd members' client URLs in node.json")
		return nil
	})
}

// recordEndpoints calls save with cli's endpoints, sorted, whenever they
// differ from those saved last (initially saved), checking every every,
// until ctx ends. A failed save is tried again at the next check.
func recordEndpoints(ctx context.Context, cli *clientv3.Client, saved []string, every time.Duration, save func([]string) error) error {
	saved = slices.Sorted(slices.Values(saved))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if eps := slices.Sorted(slices.Values(cli.Endpoints())); len(eps) > 0 && !slices.Equal(eps, saved) {
			if save(eps) == nil {
				saved = eps
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// memberSyncInterval is how often etcd clients of other members' URLs
// refresh them from the member list.
const memberSyncInterval = 30 * time.Second

// endpointsCheckInterval is how often a worker compares the etcd URLs its
// client knows with those node.json holds.
const endpointsCheckInterval = 10 * time.Second
