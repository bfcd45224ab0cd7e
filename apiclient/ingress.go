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

// ListIngressCertificates returns every ingress certificate record without
// its chain or key, with the rules that use it.
func (c *Client) ListIngressCertificates(ctx context.Context) ([]api.IngressCertificateView, error) {
	var out []api.IngressCertificateView
	return out, c.do(ctx, http.MethodGet, api.IngressCertificatesPath, nil, nil, "", &out)
}

// DeleteIngressCertificate deletes the ingress certificate of kind and
// name; one that a rule uses only with force.
func (c *Client) DeleteIngressCertificate(ctx context.Context, kind, name string, force bool) error {
	q := url.Values{}
	if force {
		q.Set("force", "true")
	}
	return c.do(ctx, http.MethodDelete, api.IngressCertificatesPath+"/"+url.PathEscape(kind)+"/"+url.PathEscape(name), q, nil, "", nil)
}
