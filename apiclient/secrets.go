package apiclient

import (
	"context"
	"net/http"
	"net/url"

	"kat.dws.rip/kat/api"
)

// SecretsRecipient returns the cluster's age recipient: what secret files
// are encrypted to.
func (c *Client) SecretsRecipient(ctx context.Context) (*api.SecretsRecipient, error) {
	var out api.SecretsRecipient
	return &out, c.do(ctx, http.MethodGet, "/v1alpha1/secrets/recipient", nil, nil, "", &out)
}

// ListSecrets returns what may be shown of the secrets of ns (every
// namespace for ""): names, keys, versions; never a value.
func (c *Client) ListSecrets(ctx context.Context, ns string) ([]api.SecretInfo, error) {
	path := "/v1alpha1/secrets"
	if ns != "" {
		path = "/v1alpha1/n/" + url.PathEscape(ns) + "/secrets"
	}
	var out []api.SecretInfo
	return out, c.do(ctx, http.MethodGet, path, nil, nil, "", &out)
}

// GetSecret returns what may be shown of one secret.
func (c *Client) GetSecret(ctx context.Context, ns, name string) (*api.SecretInfo, error) {
	var out api.SecretInfo
	return &out, c.do(ctx, http.MethodGet, "/v1alpha1/n/"+url.PathEscape(ns)+"/secrets/"+url.PathEscape(name), nil, nil, "", &out)
}

// GetNodeSecret returns the values of a secret an instance of node uses;
// only node's own certificate may ask.
func (c *Client) GetNodeSecret(ctx context.Context, node, ns, name string) (*api.SecretDelivery, error) {
	var out api.SecretDelivery
	return &out, c.do(ctx, http.MethodGet, "/v1alpha1/nodes/"+url.PathEscape(node)+"/secrets/"+url.PathEscape(ns)+"/"+url.PathEscape(name), nil, nil, "", &out)
}

// PutSecret writes an API-owned secret from a SOPS file encrypted to the
// cluster's recipient; the plaintext never travels.
func (c *Client) PutSecret(ctx context.Context, ns, name string, sopsFile []byte) (*api.SecretInfo, error) {
	var out api.SecretInfo
	return &out, c.do(ctx, http.MethodPut, "/v1alpha1/n/"+url.PathEscape(ns)+"/secrets/"+url.PathEscape(name), nil, sopsFile, "application/yaml", &out)
}

// DeleteSecret deletes an API-owned secret.
func (c *Client) DeleteSecret(ctx context.Context, ns, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1alpha1/n/"+url.PathEscape(ns)+"/secrets/"+url.PathEscape(name), nil, nil, "", nil)
}
