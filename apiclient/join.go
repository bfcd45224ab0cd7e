package apiclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
)

// Join joins the cluster whose API is server (https://host:port) with tok:
// it fetches the CA over an unverified connection, checks it against the
// token's fingerprint (nothing secret is sent before), then sends req with
// the token's secret over a connection verified with that CA.
func Join(ctx context.Context, server string, tok pki.JoinToken, req api.JoinRequest) (*api.JoinResponse, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("leader API %q: want https://host:port", server)
	}
	caPEM, err := fetchCA(ctx, u)
	if err != nil {
		return nil, err
	}
	if _, err := pki.VerifyFingerprint(caPEM, tok.CAFingerprint); err != nil {
		return nil, fmt.Errorf("verify the leader at %s: %w", u.Host, err)
	}
	c, err := New(Config{Server: server, CAData: caPEM, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	req.Secret = tok.Secret
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode join request: %w", err)
	}
	var resp api.JoinResponse
	if err := c.do(ctx, http.MethodPost, api.JoinPath, nil, body, "application/json", &resp); err != nil {
		return nil, fmt.Errorf("join the cluster at %s: %w", u.Host, err)
	}
	if resp.CA != string(caPEM) {
		return nil, fmt.Errorf("join the cluster at %s: the CA in the answer is not the one the leader served", u.Host)
	}
	return &resp, nil
}

// fetchCA reads the CA certificate the API serves. The connection is not
// verified (the caller checks the certificate's fingerprint) and carries
// nothing secret.
func fetchCA(ctx context.Context, u *url.URL) ([]byte, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true} //nolint:gosec // checked against the token's fingerprint
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	ca := *u
	ca.Path = strings.TrimSuffix(u.Path, "/") + api.CACertPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ca.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA from %s: %w", u.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("fetch the cluster CA from %s: %w", u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &api.Error{StatusCode: resp.StatusCode, Code: api.CodeUnavailable,
			Message: fmt.Sprintf("fetch the cluster CA from %s: %s: %s", u.Host, resp.Status, strings.TrimSpace(string(b)))}
	}
	return b, nil
}
