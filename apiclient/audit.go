package apiclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"kat.dws.rip/kat/api"
)

// ListAudit returns the newest audit entries matching q, oldest first.
func (c *Client) ListAudit(ctx context.Context, q api.AuditQuery) ([]api.AuditEntry, error) {
	v := url.Values{}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Actor != "" {
		v.Set("actor", q.Actor)
	}
	if q.Resource != "" {
		v.Set("resource", q.Resource)
	}
	var out []api.AuditEntry
	return out, c.do(ctx, http.MethodGet, api.AuditPath, v, nil, "", &out)
}
