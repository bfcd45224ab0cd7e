package apiclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"kat.dws.rip/kat/api"
)

// ListSources returns every Git source with its status.
func (c *Client) ListSources(ctx context.Context) ([]api.Source, error) {
	var out []api.Source
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/sources", nil, nil, "", &out)
}

// GetSource returns one Git source.
func (c *Client) GetSource(ctx context.Context, name string) (*api.Source, error) {
	var s api.Source
	return &s, c.do(ctx, http.MethodGet, "/v1alpha1/sources/"+url.PathEscape(name), nil, nil, "", &s)
}

// PutSource creates or replaces a Git source.
func (c *Client) PutSource(ctx context.Context, spec api.SourceSpec) (*api.Source, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	var s api.Source
	return &s, c.do(ctx, http.MethodPut, "/v1alpha1/sources/"+url.PathEscape(spec.Name), nil, b, "application/json", &s)
}

// DeleteSource deletes a Git source; its workloads stay.
func (c *Client) DeleteSource(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1alpha1/sources/"+url.PathEscape(name), nil, nil, "", nil)
}

// Sync asks one source (every source for "") to fetch now.
func (c *Client) Sync(ctx context.Context, name string) (*api.SyncResult, error) {
	path := "/v1alpha1/sync"
	if name != "" {
		path = "/v1alpha1/sources/" + url.PathEscape(name) + "/sync"
	}
	var res api.SyncResult
	return &res, c.do(ctx, http.MethodPost, path, nil, nil, "", &res)
}

// SuspendWorkload pauses Git management of a workload.
func (c *Client) SuspendWorkload(ctx context.Context, ns, name string) (*api.Workload, error) {
	var w api.Workload
	return &w, c.do(ctx, http.MethodPost, workloadsPath(ns)+"/"+url.PathEscape(name)+"/suspend", nil, nil, "", &w)
}

// ResumeWorkload hands a workload back to Git management.
func (c *Client) ResumeWorkload(ctx context.Context, ns, name string) (*api.Workload, error) {
	var w api.Workload
	return &w, c.do(ctx, http.MethodPost, workloadsPath(ns)+"/"+url.PathEscape(name)+"/resume", nil, nil, "", &w)
}

// ListEvents returns the newest limit events, oldest first.
func (c *Client) ListEvents(ctx context.Context, limit int) ([]api.Event, error) {
	var out []api.Event
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/events", q, nil, "", &out)
}
