package apiclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"kat.dws.rip/kat/api"
)

// WorkloadStatus returns a workload with its instances.
func (c *Client) WorkloadStatus(ctx context.Context, ns, name string) (*api.WorkloadDetail, error) {
	var d api.WorkloadDetail
	return &d, c.do(ctx, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name)+"/status", nil, nil, "", &d)
}

// PostNodeStatus reports a node's status (the agent heartbeat).
func (c *Client) PostNodeStatus(ctx context.Context, st api.NodeStatus) error {
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
	return c.LogsMatching(ctx, ns, name, LogQuery{Instance: instance, Follow: follow}, w)
}

// LogQuery selects the logs LogsMatching writes.
type LogQuery struct {
	// Instance names one instance; empty: the first, unless All.
	Instance string
	// All asks for every instance at once, each line prefixed with
	// "[instanceID] ".
	All bool
	// Follow, Tail, Timestamps and Previous are api.LogOptions'.
	Follow, Timestamps, Previous bool
	Tail                         int
	// Since is an RFC 3339 time or a duration ("10m") the server counts
	// back from its clock.
	Since string
}

// LogsMatching writes the logs of workload ns/name that q selects to w.
// With q.Follow it streams until ctx ends; the client's timeout does not
// apply.
func (c *Client) LogsMatching(ctx context.Context, ns, name string, q LogQuery, w io.Writer) error {
	v := api.LogOptions{Follow: q.Follow, Tail: q.Tail, Timestamps: q.Timestamps, Previous: q.Previous}.Values()
	if q.Since != "" {
		v.Set(api.LogParamSince, q.Since)
	}
	if q.Instance != "" {
		v.Set("instance", q.Instance)
	}
	if q.All {
		v.Set(api.LogParamAll, "true")
	}
	return c.streamLogs(ctx, ns, name, v, w, "logs")
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
	hc := *c.http
	hc.Timeout = 0
	resp, err := c.send(ctx, &hc, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name)+"/logs", q, nil, nil)
	if err != nil {
		return fmt.Errorf("get %s of %s/%s: %w", what, ns, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return errorOf(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil && ctx.Err() == nil {
		return fmt.Errorf("read %s of %s/%s: %w", what, ns, name, err)
	}
	return nil
}

// errorOf reads the API error of a failed streaming request.
func errorOf(resp *http.Response) *api.Error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	apiErr := &api.Error{StatusCode: resp.StatusCode}
	if json.Unmarshal(data, apiErr) != nil || apiErr.Message == "" {
		apiErr.Code, apiErr.Message = http.StatusText(resp.StatusCode), resp.Request.Method+" "+resp.Request.URL.Path+": "+resp.Status
	}
	return apiErr
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
func (c *Client) PostNodeEvent(ctx context.Context, node string, ev api.Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return c.do(ctx, http.MethodPost, "/v1alpha1/nodes/"+url.PathEscape(node)+"/events", nil, b, "application/json", nil)
}

// PostNodeDeparture tells the leader that node's agent leaves for good.
func (c *Client) PostNodeDeparture(ctx context.Context, node string, d api.NodeDeparture) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode departure: %w", err)
	}
	return c.do(ctx, http.MethodPost, "/v1alpha1/nodes/"+url.PathEscape(node)+"/depart", nil, b, "application/json", nil)
}

// HandBack hands the cluster the workloads node created while it was
// detached (docs/detached.md) and says which it took.
func (c *Client) HandBack(ctx context.Context, node string, hb api.HandBack) (*api.HandBackResult, error) {
	b, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("encode the hand-back: %w", err)
	}
	var out api.HandBackResult
	if err := c.do(ctx, http.MethodPost, "/v1alpha1/nodes/"+url.PathEscape(node)+"/handback", nil, b, "application/json", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// WorkloadHistory lists a workload's archived generations with their
// outcomes, oldest first.
func (c *Client) WorkloadHistory(ctx context.Context, ns, name string) ([]api.HistoryEntry, error) {
	var h []api.HistoryEntry
	return h, c.do(ctx, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name)+"/history", nil, nil, "", &h)
}

// WorkloadRollout returns the rollout of a workload's current generation
// and the outcome of generation gen (0: the current one).
func (c *Client) WorkloadRollout(ctx context.Context, ns, name string, gen int64) (*api.RolloutStatus, error) {
	var q url.Values
	if gen > 0 {
		q = url.Values{"generation": {strconv.FormatInt(gen, 10)}}
	}
	var st api.RolloutStatus
	return &st, c.do(ctx, http.MethodGet, workloadsPath(ns)+"/"+url.PathEscape(name)+"/rollout", q, nil, "", &st)
}

// RollbackWorkload applies the files of generation to (0: the previous one
// that rolled out successfully) again as a new generation.
func (c *Client) RollbackWorkload(ctx context.Context, ns, name string, to int64) (*api.RollbackResult, error) {
	var q url.Values
	if to > 0 {
		q = url.Values{"toGeneration": {strconv.FormatInt(to, 10)}}
	}
	var res api.RollbackResult
	return &res, c.do(ctx, http.MethodPost, workloadsPath(ns)+"/"+url.PathEscape(name)+"/rollback", q, nil, "", &res)
}
