package apiclient

import (
	"context"
	"net/http"

	"kat.dws.rip/kat/api"
)

// ListIngress returns every ingress route: host, path, workload, backends.
func (c *Client) ListIngress(ctx context.Context) ([]api.IngressRouteView, error) {
	var out []api.IngressRouteView
	return out, c.do(ctx, http.MethodGet, api.IngressPath, nil, nil, "", &out)
}
