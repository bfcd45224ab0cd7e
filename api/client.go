package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/pki"
)

// ClientConfig says how to reach and authenticate to the API.
type ClientConfig struct {
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
}

// Client calls the v1alpha1 API. Errors answered by the server are *Error.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("api server URL %q: want https://host:port", cfg.Server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
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
	return &Client{base: u, token: cfg.Token, http: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

// Server returns the base URL the client talks to.
func (c *Client) Server() string { return c.base.String() }

// do sends a request and decodes a JSON answer into out (when not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, contentType string, out any) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(ctx, req, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		apiErr := &Error{StatusCode: resp.StatusCode}
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

// send sends req, and sends it again when the server answers 429 Too Many
// Requests (which changes no state), waiting as Retry-After asks (at most 5s)
// or backing off from 100ms.
func (c *Client) send(ctx context.Context, req *http.Request, body []byte) (*http.Response, error) {
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		if body != nil {
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := c.http.Do(req)
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
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	return &st, c.do(ctx, http.MethodGet, "/v1alpha1/status", nil, nil, "", &st)
}

// ClusterConfig returns the sanitised cluster configuration.
func (c *Client) ClusterConfig(ctx context.Context) (*ClusterConfig, error) {
	var cc ClusterConfig
	return &cc, c.do(ctx, http.MethodGet, "/v1alpha1/config/cluster", nil, nil, "", &cc)
}

// ListNodes returns every node.
func (c *Client) ListNodes(ctx context.Context) ([]Node, error) {
	var out []Node
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/nodes", nil, nil, "", &out)
}

// ListNamespaces returns every namespace.
func (c *Client) ListNamespaces(ctx context.Context) ([]Namespace, error) {
	var out []Namespace
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/namespaces", nil, nil, "", &out)
}

// CreateNamespace creates a namespace from a namespace.kat document.
func (c *Client) CreateNamespace(ctx context.Context, doc []byte) (*Namespace, error) {
	var ns Namespace
	return &ns, c.do(ctx, http.MethodPost, "/v1alpha1/namespaces", nil, doc, "application/yaml", &ns)
}

// PutNamespace creates a namespace or replaces its labels.
func (c *Client) PutNamespace(ctx context.Context, name string, doc []byte) (*Namespace, error) {
	var ns Namespace
	return &ns, c.do(ctx, http.MethodPut, "/v1alpha1/namespaces/"+url.PathEscape(name), nil, doc, "application/yaml", &ns)
}

// DeleteNamespace deletes an empty namespace.
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1alpha1/namespaces/"+url.PathEscape(name), nil, nil, "", nil)
}

// ListWorkloads returns the workloads of ns, or of all namespaces when ns is
// empty.
func (c *Client) ListWorkloads(ctx context.Context, ns string) ([]Workload, error) {
	path := "/v1alpha1/workloads"
	if ns != "" {
		path = workloadsPath(ns)
	}
	var out []Workload
	return out, c.do(ctx, http.MethodGet, path, nil, nil, "", &out)
}

// GetWorkload returns one workload.
func (c *Client) GetWorkload(ctx context.Context, ns, name string) (*Workload, error) {
	var w Workload
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
func (c *Client) ApplyWorkload(ctx context.Context, ns, name string, archive []byte, opts ApplyOptions) (*ApplyResult, error) {
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
	var res ApplyResult
	return &res, c.do(ctx, method, path, q, archive, "application/gzip", &res)
}

// DeleteWorkload deletes a workload; force is needed for a Git-owned one.
func (c *Client) DeleteWorkload(ctx context.Context, ns, name string, force bool) (*Workload, error) {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	var w Workload
	return &w, c.do(ctx, http.MethodDelete, workloadsPath(ns)+"/"+url.PathEscape(name), q, nil, "", &w)
}

func workloadsPath(ns string) string { return "/v1alpha1/n/" + url.PathEscape(ns) + "/workloads" }
