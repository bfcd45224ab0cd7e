package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// reportTimeout bounds one request to the leader.
const reportTimeout = 10 * time.Second

// LeaderLink is how a worker writes its facts: its etcd user may only read
// (resources.WorkerGrants), so its status, build records and events go to
// the API of whichever node leads now (the leader records its endpoint in
// etcd), authenticated by the node's certificate; a new leader is followed
// without a restart. It is a worker's Facts. It is safe for concurrent use.
type LeaderLink struct {
	node   string
	repo   *resources.Repo
	caPEM  []byte
	cert   *pki.Leaf
	mu     sync.Mutex
	url    string
	client *apiclient.Client
}

// NewLeaderLink returns the link of node, which finds the leader in repo
// and authenticates with cert, trusting the cluster CA caPEM.
func NewLeaderLink(node string, repo *resources.Repo, caPEM []byte, cert *pki.Leaf) *LeaderLink {
	return &LeaderLink{node: node, repo: repo, caPEM: caPEM, cert: cert}
}

// leader returns a client of the current leader's API and its URL.
func (l *LeaderLink) leader(ctx context.Context) (*apiclient.Client, string, error) {
	ep, err := l.repo.GetLeaderEndpoint(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("find the leader: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client == nil || l.url != ep.APIURL {
		c, err := apiclient.New(apiclient.Config{Server: ep.APIURL, CAData: l.caPEM, ClientCert: l.cert, Timeout: reportTimeout, HTTP1: true})
		if err != nil {
			return nil, "", fmt.Errorf("reach the leader at %s: %w", ep.APIURL, err)
		}
		l.client, l.url = c, ep.APIURL
	}
	return l.client, ep.APIURL, nil
}

// NodeSecret fetches the values of a secret an instance of the node uses
// (SecretSource); the leader answers only the node's own certificate.
func (l *LeaderLink) NodeSecret(ctx context.Context, ns, name string) (*api.SecretDelivery, error) {
	c, url, err := l.leader(ctx)
	if err != nil {
		return nil, err
	}
	d, err := c.GetNodeSecret(ctx, l.node, ns, name)
	if err != nil {
		return nil, fmt.Errorf("ask the leader at %s: %w", url, err)
	}
	return d, nil
}

// IngressCertificate fetches an ingress certificate with its key for the
// node's proxy; the leader answers only the node's own certificate, and
// only while the node runs a proxy instance.
func (l *LeaderLink) IngressCertificate(ctx context.Context, kind, name string) (*api.IngressCertificateBundle, error) {
	c, url, err := l.leader(ctx)
	if err != nil {
		return nil, err
	}
	b, err := c.GetNodeIngressCertificate(ctx, l.node, kind, name)
	if err != nil {
		return nil, fmt.Errorf("ask the leader at %s: %w", url, err)
	}
	return b, nil
}

// RecordStatus reports the node's status to the leader (Facts).
func (l *LeaderLink) RecordStatus(ctx context.Context, st api.NodeStatus) error {
	c, url, err := l.leader(ctx)
	if err != nil {
		return err
	}
	if err := c.PostNodeStatus(ctx, st); err != nil {
		return fmt.Errorf("report to the leader at %s: %w", url, err)
	}
	return nil
}

// RecordDeparture tells the leader that the node's agent leaves for good
// (Facts).
func (l *LeaderLink) RecordDeparture(ctx context.Context, node string, d api.NodeDeparture) error {
	c, url, err := l.leader(ctx)
	if err != nil {
		return err
	}
	if err := c.PostNodeDeparture(ctx, node, d); err != nil {
		return fmt.Errorf("tell the leader at %s of the departure: %w", url, err)
	}
	return nil
}

// HandBack hands the leader the workloads the node created while it was
// detached (docs/detached.md) and returns what the leader did with them.
func (l *LeaderLink) HandBack(ctx context.Context, hb api.HandBack) (*api.HandBackResult, error) {
	c, url, err := l.leader(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.HandBack(ctx, l.node, hb)
	if err != nil {
		return nil, fmt.Errorf("hand back the workloads created while detached to the leader at %s: %w", url, err)
	}
	return res, nil
}

// PutBuildRecord stores a build record of this node with the leader
// (Facts).
func (l *LeaderLink) PutBuildRecord(ctx context.Context, r api.Build) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode build record: %w", err)
	}
	c, url, err := l.leader(ctx)
	if err != nil {
		return err
	}
	if err := c.PutNodeBuildRecord(ctx, l.node, r.Namespace, r.Workload, r.Commit, b); err != nil {
		return fmt.Errorf("store the build record of %s/%s at %s with the leader at %s: %w", r.Namespace, r.Workload, r.Commit, url, err)
	}
	return nil
}

// AppendEvent records an event of this node with the leader (Facts).
func (l *LeaderLink) AppendEvent(ctx context.Context, ev api.Event) error {
	c, url, err := l.leader(ctx)
	if err != nil {
		return err
	}
	if err := c.PostNodeEvent(ctx, l.node, ev); err != nil {
		return fmt.Errorf("record event %s with the leader at %s: %w", ev.Reason, url, err)
	}
	return nil
}
