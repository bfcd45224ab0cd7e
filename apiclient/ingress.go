package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"kat.dws.rip/kat/api"
)

// ListIngress returns every ingress route: host, path, workload, backends.
func (c *Client) ListIngress(ctx context.Context) ([]api.IngressRouteView, error) {
	var out []api.IngressRouteView
	return out, c.do(ctx, http.MethodGet, api.IngressPath, nil, nil, "", &out)
}

// GetNodeIngressCertificate returns an ingress certificate with its key,
// for node's ingress proxy; only node's own certificate may ask.
func (c *Client) GetNodeIngressCertificate(ctx context.Context, node, kind, name string) (*api.IngressCertificateBundle, error) {
	var out api.IngressCertificateBundle
	return &out, c.do(ctx, http.MethodGet, "/v1alpha1/nodes/"+url.PathEscape(node)+"/ingress/certificates/"+url.PathEscape(kind)+"/"+url.PathEscape(name), nil, nil, "", &out)
}
