package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	return c.ListEventsMatching(ctx, EventQuery{Limit: limit})
}

// EventQuery selects events (GET /v1alpha1/events); an empty field
// matches every event.
type EventQuery struct {
	Namespace, Kind, Name, Type string
	// Since is an RFC 3339 time or a duration ("10m") the server counts
	// back from its clock.
	Since string
	// Limit is how many of the newest matching events to return; 0: the
	// server's default (50).
	Limit int
}

func (q EventQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{api.EventParamNamespace: q.Namespace, api.EventParamKind: q.Kind,
		api.EventParamName: q.Name, api.EventParamType: q.Type, api.EventParamSince: q.Since} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// ListEventsMatching returns the newest events that pass q, oldest first.
func (c *Client) ListEventsMatching(ctx context.Context, q EventQuery) ([]api.Event, error) {
	var out []api.Event
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/events", q.values(), nil, "", &out)
}

// ErrStreamEnded is what WatchEvents returns when the server ends the
// stream (its leadership ended, or it stopped): watch again.
var ErrStreamEnded = errors.New("apiclient: the server ended the stream")

// WatchEvents calls fn with the newest events that pass q and then with
// every new one as the server records it, until ctx ends (it returns
// nil), fn returns an error (returned) or the stream ends (an error
// wrapping ErrStreamEnded). The client's timeout does not apply.
func (c *Client) WatchEvents(ctx context.Context, q EventQuery, fn func(api.Event) error) error {
	hc := *c.http
	hc.Timeout = 0
	v := q.values()
	v.Set("watch", "true")
	resp, err := c.send(ctx, &hc, http.MethodGet, "/v1alpha1/events", v, nil, nil)
	if err != nil {
		return fmt.Errorf("watch events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fmt.Errorf("watch events: %w", errorOf(resp))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue // a keepalive
		}
		var ev api.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("watch events: decode %q: %w", line, err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("watch events: %w: %w", ErrStreamEnded, err)
	}
	return fmt.Errorf("watch events: %w", ErrStreamEnded)
}
