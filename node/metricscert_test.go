package node

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
)

// TestMetricsCertScrapesOnly: the admin has the leader sign a metrics
// certificate; it scrapes /metrics on the agent and API ports and gets 403
// on every other route of both, and etcd refuses it; bad requests are
// refused naming the field.
func TestMetricsCertScrapesOnly(t *testing.T) {
	t.Parallel()
	leader, lo := runLeader(t, t.TempDir())
	ctx := t.Context()
	ep, err := leader.repo.GetLeaderEndpoint(ctx)
	must(t, err)
	token := strings.TrimSpace(string(readFile(t, filepath.Join(lo.DataDir, "admin.token"))))
	admin, err := apiclient.New(apiclient.Config{Server: ep.APIURL, Token: token, CAData: leader.ca.CertPEM})
	must(t, err)
	// The common name asked for is ignored: the leader names it.
	csrPEM, keyPEM, err := pki.NewCSR("n1", []string{"n1"}, nil)
	must(t, err)

	for _, tc := range []struct {
		name, csr string
		days      int
		field     string
	}{
		{"Prometheus", string(csrPEM), 0, "name"},
		{"prom", "", 0, "csr"},
		{"prom", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n", 0, "csr"},
		{"prom", string(leader.ca.CertPEM), 0, "csr"},
		{"prom", string(csrPEM), api.MaxMetricsCertDays + 1, "validityDays"},
		{"prom", string(csrPEM), -1, "validityDays"},
	} {
		_, err := admin.IssueMetricsCert(ctx, tc.name, []byte(tc.csr), tc.days)
		var apiErr *api.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.field) {
			t.Errorf("metrics certificate %q, %d days, csr %.30q: %v, want 400 naming %s", tc.name, tc.days, tc.csr, err, tc.field)
		}
	}
	anonymous, err := apiclient.New(apiclient.Config{Server: ep.APIURL, CAData: leader.ca.CertPEM})
	must(t, err)
	var apiErr *api.Error
	if _, err := anonymous.IssueMetricsCert(ctx, "prom", csrPEM, 0); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
		t.Errorf("a metrics certificate without the admin token: %v, want 401", err)
	}

	resp, err := admin.IssueMetricsCert(ctx, "prom", csrPEM, 30)
	must(t, err)
	cert, err := pki.ParseCertificate([]byte(resp.Certificate))
	must(t, err)
	if _, err := cert.Verify(x509VerifyOptions(t, resp.CA)); err != nil {
		t.Errorf("the metrics certificate does not verify against the CA it came with: %v", err)
	}
	if cert.Subject.CommonName != api.MetricsCertPrefix+"prom" {
		t.Errorf("common name %q, want %q", cert.Subject.CommonName, api.MetricsCertPrefix+"prom")
	}
	if d := time.Until(resp.NotAfter) - 30*24*time.Hour; d > time.Minute || d < -time.Minute || !resp.NotAfter.Equal(cert.NotAfter) {
		t.Errorf("not after %s (certificate %s), want 30 days from now", resp.NotAfter, cert.NotAfter)
	}

	leaf := &pki.Leaf{CertPEM: []byte(resp.Certificate), KeyPEM: keyPEM}
	tlsCfg, err := pki.ClientTLSConfig(leader.ca.Pool(), leaf)
	must(t, err)
	tr := &http.Transport{TLSClientConfig: tlsCfg}
	defer tr.CloseIdleConnections()
	scraper := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	agentURL := fmt.Sprintf("https://127.0.0.1:%d", lo.AgentPort)
	for _, tc := range []struct {
		method, url string
		want        int
	}{
		{http.MethodGet, agentURL + "/metrics", http.StatusOK},
		{http.MethodGet, ep.APIURL + "/metrics", http.StatusOK},
		{http.MethodGet, agentURL + "/v1alpha1/instances/x/logs", http.StatusForbidden},
		{http.MethodGet, agentURL + "/v1alpha1/builds/default/web/0123456789ab/log", http.StatusForbidden},
		{http.MethodGet, ep.APIURL + "/v1alpha1/nodes", http.StatusForbidden},
		{http.MethodPost, ep.APIURL + "/v1alpha1/nodes/" + api.MetricsCertPrefix + "prom/status", http.StatusForbidden},
	} {
		req, err := http.NewRequestWithContext(ctx, tc.method, tc.url, strings.NewReader("{}"))
		must(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := scraper.Do(req)
		if err != nil {
			t.Errorf("%s %s with the metrics certificate: %v", tc.method, tc.url, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s with the metrics certificate: %d, want %d", tc.method, tc.url, resp.StatusCode, tc.want)
		}
	}

	// etcd has no user of that name: every read is refused.
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{fmt.Sprintf("https://127.0.0.1:%d", lo.EtcdClientPort)}, TLS: tlsCfg})
	if err != nil {
		t.Logf("etcd refuses the metrics certificate at once: %v", err)
		return
	}
	defer st.Close()
	for _, key := range []string{"/kat/config/cluster", "/kat/config/admin_token_sha256"} {
		kv, err := st.Get(ctx, key)
		if err == nil {
			t.Errorf("etcd get %s with the metrics certificate: %q, want refused", key, kv.Value)
		}
		t.Logf("etcd get %s with the metrics certificate: %v", key, err)
	}
}

func x509VerifyOptions(t *testing.T, caPEM string) x509.VerifyOptions {
	t.Helper()
	pool, err := pki.CertPool([]byte(caPEM))
	must(t, err)
	return x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
}
