package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"kat.dws.rip/kat/api"
)

// ListJobRuns returns the runs of every Job, of namespace ns when it is not
// empty, sorted by namespace, name and start time.
func (c *Client) ListJobRuns(ctx context.Context, ns string) ([]api.JobRun, error) {
	q := url.Values{}
	if ns != "" {
		q.Set("namespace", ns)
	}
	var out []api.JobRun
	return out, c.do(ctx, http.MethodGet, "/v1alpha1/jobs", q, nil, "", &out)
}
