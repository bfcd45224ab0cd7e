package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// reportTimeout bounds one heartbeat POST.
const reportTimeout = 10 * time.Second

// LeaderReporter returns the heartbeat's Post function for a node: it sends
// the status to the API of whichever node leads now (the leader records its
// endpoint in etcd), authenticated by the node's certificate, and follows a
// new leader without a restart.
func LeaderReporter(repo *resources.Repo, caPEM []byte, cert *pki.Leaf) func(context.Context, api.NodeStatus) error {
	var (
		mu     sync.Mutex
		url    string
		client *api.Client
	)
	return func(ctx context.Context, st api.NodeStatus) error {
		ep, err := repo.GetLeaderEndpoint(ctx)
		if err != nil {
			return fmt.Errorf("find the leader: %w", err)
		}
		mu.Lock()
		if client == nil || url != ep.APIURL {
			c, err := api.NewClient(api.ClientConfig{Server: ep.APIURL, CAData: caPEM, ClientCert: cert, Timeout: reportTimeout})
			if err != nil {
				mu.Unlock()
				return fmt.Errorf("reach the leader at %s: %w", ep.APIURL, err)
			}
			client, url = c, ep.APIURL
		}
		c := client
		mu.Unlock()
		if err := c.PostNodeStatus(ctx, st); err != nil {
			return fmt.Errorf("report to the leader at %s: %w", ep.APIURL, err)
		}
		return nil
	}
}
