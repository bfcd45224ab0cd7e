package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// WorkloadStatus returns a workload with its instances.
func (c *Client) WorkloadStatus(ctx context.Context, ns, name string) (*WorkloadDetail, error) {
	var d WorkloadDetail
	return &d, c.do(ctx, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name)+"/status", nil, nil, "", &d)
}

// PostNodeStatus reports a node's status (the agent heartbeat).
func (c *Client) PostNodeStatus(ctx context.Context, st NodeStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode node status: %w", err)
	}
	return c.do(ctx, http.MethodPost, "/v1alpha1/nodes/"+url.PathEscape(st.NodeName)+"/status", nil, b, "application/json", nil)
}

// Logs writes the output of one instance of workload ns/name to w (the first
// instance when instance is empty). With follow it streams until ctx ends or
// the container stops; the client's timeout does not apply.
func (c *Client) Logs(ctx context.Context, ns, name, instance string, follow bool, w io.Writer) error {
	q := url.Values{"follow": {strconv.FormatBool(follow)}}
	if instance != "" {
		q.Set("instance", instance)
	}
	return c.streamLogs(ctx, ns, name, q, w, "logs")
}

// BuildLog writes the log of the build of commit (a prefix of at least 7
// digits; empty: the commit the workload's status names) of workload
// ns/name to w, from the node that built it.
func (c *Client) BuildLog(ctx context.Context, ns, name, commit string, w io.Writer) error {
	q := url.Values{"build": {"true"}}
	if commit != "" {
		q.Set("commit", commit)
	}
	return c.streamLogs(ctx, ns, name, q, w, "build log")
}

func (c *Client) streamLogs(ctx context.Context, ns, name string, q url.Values, w io.Writer, what string) error {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + workloadsPath(ns) + "/" + url.PathEscape(name) + "/logs"
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("build %s request: %w", what, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := *c.http
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("get %s of %s/%s: %w", what, ns, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		apiErr := &Error{StatusCode: resp.StatusCode}
		if json.Unmarshal(data, apiErr) != nil || apiErr.Message == "" {
			apiErr.Code, apiErr.Message = http.StatusText(resp.StatusCode), what+": "+resp.Status
		}
		return apiErr
	}
	if _, err := io.Copy(w, resp.Body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read %s of %s/%s: %w", what, ns, name, err)
	}
	return nil
}

// PutNodeBuildRecord stores node's record of the build of commit of
// workload ns/name (the JSON of a build record, whose node, namespace,
// workload and commit must be these). A node may store only its own
// records: the leader checks its certificate's common name.
func (c *Client) PutNodeBuildRecord(ctx context.Context, node, ns, name, commit string, record []byte) error {
	p := "/v1alpha1/nodes/" + url.PathEscape(node) + "/builds/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/" + url.PathEscape(commit)
	return c.do(ctx, http.MethodPut, p, nil, record, "application/json", nil)
}

// PostNodeEvent records an event node reports (the leader sets its time).
func (c *Client) PostNodeEvent(ctx context.Context, node string, ev Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return c.do(ctx, http.MethodPost, "/v1alpha1/nodes/"+url.PathEscape(node)+"/events", nil, b, "application/json", nil)
}
