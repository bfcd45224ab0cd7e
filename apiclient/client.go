package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
)

// Config says how to reach and authenticate to the API.
type Config struct {
	// Server is the API base URL, e.g. https://10.0.0.1:9115.
	Server string
	// Token is the admin bearer token.
	Token string
	// CAData is the PEM cluster CA certificate the server's certificate must
	// chain to. Required for https URLs: the client never falls back to the
	// system roots or to skipping verification.
	CAData []byte
	// Timeout bounds each request. Default 30s.
	Timeout time.Duration
	// ClientCert is presented for mutual TLS: a node's certificate, with
	// which an agent reports its status. Default none.
	ClientCert *pki.Leaf
	// Servers are further API URLs of the same cluster (its other etcd
	// members'). When the server in use cannot be reached, or answers that
	// it cannot serve for want of a leader, the client tries the next one,
	// and keeps going round them for FailoverTimeout. Server comes first.
	Servers []string
	// FailoverTimeout bounds how long a request goes on trying the servers
	// while none answers: electing a new leader after one's loss takes a
	// few seconds. With a single server a request is tried once. Default
	// 15s.
	FailoverTimeout time.Duration
	// HTTP1 speaks HTTP/1.1 only, on kept-alive connections: what an
	// agent reports (heartbeats, every node's every tick) costs the
	// leader less that way than in HTTP/2, whose server runs every
	// request in a goroutine of its own and writes through another.
	// Default false: HTTP/2 where the server offers it.
	HTTP1 bool
}

// Client calls the v1alpha1 API. Errors answered by the server are *Error.
type Client struct {
	// bases are the servers, Server first; cur indexes the one that last
	// answered, which the next request tries first.
	bases    []*url.URL
	cur      atomic.Int64
	token    string
	http     *http.Client
	failover time.Duration
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	var bases []*url.URL
	tls := false
	for _, s := range append([]string{cfg.Server}, cfg.Servers...) {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, fmt.Errorf("api server URL %q: want https://host:port", s)
		}
		if !slices.ContainsFunc(bases, func(b *url.URL) bool { return b.String() == u.String() }) {
			bases = append(bases, u)
		}
		tls = tls || u.Scheme == "https"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tls {
		if len(cfg.CAData) == 0 {
			return nil, errors.New("api client: no certificate authority configured for an https server")
		}
		pool, err := pki.CertPool(cfg.CAData)
		if err != nil {
			return nil, fmt.Errorf("api client: %w", err)
		}
		tr.TLSClientConfig, err = pki.ClientTLSConfig(pool, cfg.ClientCert)
		if err != nil {
			return nil, err
		}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	failover := cfg.FailoverTimeout
	if failover <= 0 {
		failover = 15 * time.Second
	}
	if cfg.HTTP1 {
		tr = HTTP1Only(tr)
	}
	return &Client{bases: bases, token: cfg.Token, http: &http.Client{Transport: tr, Timeout: timeout}, failover: failover}, nil
}

// Server returns the base URL the client talks to: the server that last
// answered.
func (c *Client) Server() string { return c.base().String() }

// FailedOver reports whether a server other than the configured first one
// answered the last request: the list the client was given may be stale.
func (c *Client) FailedOver() bool { return c.cur.Load() != 0 }

func (c *Client) base() *url.URL { return c.bases[c.cur.Load()] }

// urlFor is base's URL of path with query.
func urlFor(base *url.URL, path string, query url.Values) string {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	return u.String()
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, contentType string, out any) error {
	header := http.Header{"Accept": {"application/json"}}
	if contentType != "" {
		header.Set("Content-Type", contentType)
	}
	resp, err := c.send(ctx, c.http, method, path, query, body, header)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		apiErr := &api.Error{StatusCode: resp.StatusCode}
		if json.Unmarshal(data, apiErr) != nil || apiErr.Message == "" {
			apiErr.Code = http.StatusText(resp.StatusCode)
			apiErr.Message = fmt.Sprintf("%s %s: %s", method, path, resp.Status)
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode response of %s %s: %w", method, path, err)
	}
	return nil
}

// maxRateLimitRetries bounds how often a request answered 429 is sent again.
const maxRateLimitRetries = 8

// send sends a request to the server in use, and, when there are several,
// to the others in turn while the answer says another may do better
// (failoverable), for up to the failover timeout. The server that answers
// is the one the next request tries first.
func (c *Client) send(ctx context.Context, hc *http.Client, method, path string, query url.Values, body []byte, header http.Header) (*http.Response, error) {
	deadline := time.Now().Add(c.failover)
	backoff := 200 * time.Millisecond
	var (
		failures []string
		last     error
	)
	for {
		first := int(c.cur.Load())
		for i := range c.bases {
			idx := (first + i) % len(c.bases)
			base := c.bases[idx]
			req, err := http.NewRequestWithContext(ctx, method, urlFor(base, path, query), nil)
			if err != nil {
				return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
			}
			maps.Copy(req.Header, header)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := c.sendTo(ctx, hc, req, body)
			if len(c.bases) == 1 {
				return resp, err // nothing to fail over to: the answer as it is
			}
			why, again := failoverable(method, resp, err)
			if !again || ctx.Err() != nil {
				if err == nil {
					c.cur.Store(int64(idx))
				}
				return resp, err
			}
			failures = append(failures, base.Host+": "+why)
			if err != nil {
				last = err
			} else {
				last = &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: why}
			}
		}
		if time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("%s %s: none of the %d API servers could answer (%s): %w", method, path, len(c.bases),
				strings.Join(lastN(failures, len(c.bases)), "; "), last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// lastN is the last n of s.
func lastN(s []string, n int) []string { return s[max(0, len(s)-n):] }

// failoverable says whether another server may answer where this one
// failed, and how it failed: a server that could not be reached (a request
// that was never sent, or, for a method safe to repeat, one whose answer was
// lost), or a member that answered unavailable: 503 because it has no
// leader to serve for, or, for a method safe to repeat, 502 because
// forwarding to the leader failed. A failed response's body is consumed.
func failoverable(method string, resp *http.Response, err error) (string, bool) {
	repeatable := method == http.MethodGet || method == http.MethodHead || method == http.MethodPut || method == http.MethodDelete
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return err.Error(), true
		}
		return err.Error(), repeatable
	}
	// A member answers 502 unavailable when forwarding to the leader
	// failed, perhaps after the request reached it: only a repeatable
	// request goes on.
	if resp.StatusCode != http.StatusServiceUnavailable && (resp.StatusCode != http.StatusBadGateway || !repeatable) {
		return "", false
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var apiErr api.Error
	if json.Unmarshal(data, &apiErr) == nil && apiErr.Code == api.CodeUnavailable {
		return apiErr.Message, true
	}
	resp.Body = io.NopCloser(bytes.NewReader(data))
	return "", false
}

// sendTo sends req, and sends it again when the server answers 429 Too
// Many Requests (which changes no state), waiting as Retry-After asks (at
// most 5s) or backing off from 100ms.
func (c *Client) sendTo(ctx context.Context, hc *http.Client, req *http.Request, body []byte) (*http.Response, error) {
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt == maxRateLimitRetries {
			return resp, err
		}
		wait := backoff
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		wait = min(wait, 5*time.Second)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Health calls the unauthenticated health endpoint.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/healthz", nil, nil, "", nil)
}

// Status returns the cluster summary.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var st api.Status
	return &st, c.do(ctx, http.MethodGet, "/v1alpha1/status", nil, nil, "", &st)
}

// ClusterConfig returns the sanitised cluster configuration.
func (c *Client) ClusterConfig(ctx context.Context) (*api.ClusterConfig, error) {
	var cc api.ClusterConfig
	return &cc, c.do(ctx, http.MethodGet, "/v1alpha1/config/cluster", nil, nil, "", &cc)
}

// ClusterServers returns the API URLs of the cluster's members, the
// leader's first.
func (c *Client) ClusterServers(ctx context.Context) (*api.ClusterServers, error) {
	var cs api.ClusterServers
	return &cs, c.do(ctx, http.MethodGet, "/v1alpha1/cluster/servers", nil, nil, "", &cs)
}

// ListNodes returns every node.
func (c *Client) ListNodes(ctx context.Context) ([]api.Node, error) {
	var out []api.Node
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/nodes", nil, nil, "", &out)
}

// ListNamespaces returns every namespace.
func (c *Client) ListNamespaces(ctx context.Context) ([]api.NamespaceView, error) {
	var out []api.NamespaceView
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/namespaces", nil, nil, "", &out)
}

// CreateNamespace creates a namespace from a namespace.kat document.
func (c *Client) CreateNamespace(ctx context.Context, doc []byte) (*api.NamespaceView, error) {
	var ns api.NamespaceView
	return &ns, c.do(ctx, http.MethodPost, "/v1alpha1/namespaces", nil, doc, "application/yaml", &ns)
}

// PutNamespace creates a namespace or replaces its labels.
func (c *Client) PutNamespace(ctx context.Context, name string, doc []byte) (*api.NamespaceView, error) {
	var ns api.NamespaceView
	return &ns, c.do(ctx, http.MethodPut, "/v1alpha1/namespaces/"+url.PathEscape(name), nil, doc, "application/yaml", &ns)
}

// DeleteNamespace deletes an empty namespace.
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1alpha1/namespaces/"+url.PathEscape(name), nil, nil, "", nil)
}

// ListWorkloads returns the workloads of ns, or of all namespaces when ns is
// empty.
func (c *Client) ListWorkloads(ctx context.Context, ns string) ([]api.Workload, error) {
	path := "/v1alpha1/workloads"
	if ns != "" {
		path = workloadsPath(ns)
	}
	var out []api.Workload
	return out, c.do(ctx, http.MethodGet, path, nil, nil, "", &out)
}

// GetWorkload returns one workload.
func (c *Client) GetWorkload(ctx context.Context, ns, name string) (*api.Workload, error) {
	var w api.Workload
	return &w, c.do(ctx, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name), nil, nil, "", &w)
}

// GetWorkloadFile returns one Quadlet file of a workload.
func (c *Client) GetWorkloadFile(ctx context.Context, ns, name, file string) ([]byte, error) {
	var b []byte
	path := workloadsPath(ns) + "/" + url.PathEscape(name) + "/files/" + url.PathEscape(file)
	return b, c.do(ctx, http.MethodGet, path, nil, nil, "", &b)
}

// ApplyOptions modify ApplyWorkload.
type ApplyOptions struct {
	// Force replaces a Git-owned workload and suspends its Git management.
	Force bool
	// CreateOnly fails when the workload exists (POST instead of PUT).
	CreateOnly bool
}

// ApplyWorkload uploads a tar.gz Quadlet directory as workload ns/name. With
// an empty name the name comes from workload.kat.
func (c *Client) ApplyWorkload(ctx context.Context, ns, name string, archive []byte, opts ApplyOptions) (*api.ApplyResult, error) {
	q := url.Values{}
	if opts.Force {
		q.Set("force", "true")
	}
	method, path := http.MethodPut, workloadsPath(ns)
	if name != "" {
		path += "/" + url.PathEscape(name)
	}
	if opts.CreateOnly {
		method, path = http.MethodPost, workloadsPath(ns)
	}
	var res api.ApplyResult
	return &res, c.do(ctx, method, path, q, archive, "application/gzip", &res)
}

// DeleteWorkload deletes a workload; force is needed for a Git-owned one.
func (c *Client) DeleteWorkload(ctx context.Context, ns, name string, force bool) (*api.Workload, error) {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	var w api.Workload
	return &w, c.do(ctx, http.MethodDelete, workloadsPath(ns)+"/"+url.PathEscape(name), q, nil, "", &w)
}

func workloadsPath(ns string) string { return "/v1alpha1/n/" + url.PathEscape(ns) + "/workloads" }
