package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"kat.dws.rip/kat/api"
)

func nodePath(name string) string { return "/v1alpha1/nodes/" + url.PathEscape(name) }

// GetNode returns one node.
func (c *Client) GetNode(ctx context.Context, name string) (*api.Node, error) {
	var n api.Node
	return &n, c.do(ctx, http.MethodGet, nodePath(name), nil, nil, "", &n)
}

// CordonNode marks a node unschedulable: it gets no new instance.
func (c *Client) CordonNode(ctx context.Context, name string) (*api.Node, error) {
	return c.nodeAction(ctx, name, "cordon")
}

// UncordonNode makes a node schedulable again, ending a drain too.
func (c *Client) UncordonNode(ctx context.Context, name string) (*api.Node, error) {
	return c.nodeAction(ctx, name, "uncordon")
}

// DrainNode cordons a node and marks it draining: the leader moves its
// Service and DaemonService instances off it; its Job instances finish.
func (c *Client) DrainNode(ctx context.Context, name string) (*api.Node, error) {
	return c.nodeAction(ctx, name, "drain")
}

func (c *Client) nodeAction(ctx context.Context, name, action string) (*api.Node, error) {
	var n api.Node
	return &n, c.do(ctx, http.MethodPost, nodePath(name)+"/"+action, nil, nil, "", &n)
}

// LabelNode changes a node's labels: a key mapped to a value sets it, one
// mapped to nil removes it (a JSON merge patch).
func (c *Client) LabelNode(ctx context.Context, name string, change map[string]*string) (*api.Node, error) {
	b, err := json.Marshal(change)
	if err != nil {
		return nil, fmt.Errorf("encode label change: %w", err)
	}
	var n api.Node
	return &n, c.do(ctx, http.MethodPatch, nodePath(name)+"/labels", nil, b, "application/merge-patch+json", &n)
}

// TaintNode adds and removes a node's taints.
func (c *Client) TaintNode(ctx context.Context, name string, change api.TaintChange) (*api.Node, error) {
	b, err := json.Marshal(change)
	if err != nil {
		return nil, fmt.Errorf("encode taint change: %w", err)
	}
	var n api.Node
	return &n, c.do(ctx, http.MethodPatch, nodePath(name)+"/taints", nil, b, "application/json", &n)
}

// DeleteNode removes a node from the cluster. Without force the server
// refuses a Ready node that still has instances.
func (c *Client) DeleteNode(ctx context.Context, name string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return c.do(ctx, http.MethodDelete, nodePath(name), q, nil, "", nil)
}

// RotateJoinToken issues a new join token; the previous one stops working.
func (c *Client) RotateJoinToken(ctx context.Context) (string, error) {
	var out api.JoinTokenResponse
	if err := c.do(ctx, http.MethodPost, api.JoinTokenPath, nil, nil, "", &out); err != nil {
		return "", err
	}
	return out.Token, nil
}

// IssueMetricsCert asks the leader to sign csrPEM as the metrics
// certificate of scraper name (see MetricsCertPrefix), valid for days (0:
// DefaultMetricsCertDays).
func (c *Client) IssueMetricsCert(ctx context.Context, name string, csrPEM []byte, days int) (*api.MetricsCertResponse, error) {
	b, err := json.Marshal(api.MetricsCertRequest{Name: name, CSR: string(csrPEM), ValidityDays: days})
	if err != nil {
		return nil, fmt.Errorf("encode metrics certificate request: %w", err)
	}
	var out api.MetricsCertResponse
	if err := c.do(ctx, http.MethodPost, api.MetricsCertPath, nil, b, "application/json", &out); err != nil {
		return nil, err
	}
	return &out, nil
}
