package apiserver_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/metrics/metricstest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// TestMetricsNeedTokenOrClusterCertificate: /metrics on the API port
// answers a client certificate of the cluster CA or the admin token, and
// nothing else.
func TestMetricsNeedTokenOrClusterCertificate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *pki.CA, name string) *pki.Leaf {
		l, err := ca.Issue(pki.LeafRequest{CommonName: name, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	s, err := apiserver.New(apiserver.Config{Repo: f.repo, AdminTokenHash: resources.HashToken(token), RateLimit: -1,
		Metrics: metrics.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s.Handler())
	if srv.TLS, err = pki.ServerTLSConfig(issue(ca, "server"), ca.Pool(), false); err != nil {
		t.Fatal(err)
	}
	srv.TLS.ClientAuth = tls.VerifyClientCertIfGiven
	srv.StartTLS()
	t.Cleanup(srv.Close)

	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		cert   *pki.Leaf
		bearer string
		want   int
	}{
		{"cluster certificate", issue(ca, "prometheus"), "", http.StatusOK},
		{"admin token", nil, token, http.StatusOK},
		{"nothing", nil, "", http.StatusUnauthorized},
		{"wrong token", nil, "nope", http.StatusUnauthorized},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := scrape(t, srv.URL, ca, tc.cert, tc.bearer)
			if code != tc.want {
				t.Fatalf("GET /metrics: %d %s, want %d", code, body, tc.want)
			}
			if code == http.StatusOK && !strings.Contains(body, "# TYPE kat_leader gauge") {
				t.Errorf("/metrics lacks the kat_ families:\n%.500s", body)
			}
		})
	}
	// A certificate of another CA is not sent (the server names its CA)
	// or fails the handshake; either way it opens nothing.
	if resp, err := scrapeErr(srv.URL, ca, issue(other, "intruder"), ""); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a certificate of another CA: %d, want 401", resp.StatusCode)
		}
	}
}

func TestMetricsNotServedWithoutHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if code, _ := f.raw(t, http.MethodGet, "/metrics", token, nil); code != http.StatusNotFound {
		t.Errorf("GET /metrics without Config.Metrics: %d, want 404", code)
	}
}

func TestAgentServesMetrics(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(apiserver.AgentHandler(apiserver.AgentConfig{Metrics: metrics.Handler()}))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "# TYPE kat_leader_changes_total counter") {
		t.Errorf("agent GET /metrics: %d\n%.500s", resp.StatusCode, b)
	}
}

// scrape GETs /metrics at url, trusting ca, with cert and bearer when set.
func scrape(t *testing.T, url string, ca *pki.CA, cert *pki.Leaf, bearer string) (int, string) {
	t.Helper()
	resp, err := scrapeErr(url, ca, cert, bearer)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func scrapeErr(url string, ca *pki.CA, cert *pki.Leaf, bearer string) (*http.Response, error) {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		c, err := cert.TLSCertificate()
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	return (&http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
}

// TestRequestMetrics: each request is counted by its route pattern, not its
// path, and its status code; a path no route matches is "unmatched".
func TestRequestMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	route := "/v1alpha1/n/{ns}/workloads/{name}"
	labels := func(route, code string) map[string]string {
		return map[string]string{"method": http.MethodGet, "route": route, "code": code}
	}
	before, unmatched := metricstest.Value(t, "kat_api_request_duration_seconds", labels(route, "404")),
		metricstest.Value(t, "kat_api_request_duration_seconds", labels("unmatched", "404"))
	for _, name := range []string{"absent-1", "absent-2"} {
		if code, _ := f.raw(t, http.MethodGet, "/v1alpha1/n/default/workloads/"+name, token, nil); code != http.StatusNotFound {
			t.Fatalf("GET %s: %d, want 404", name, code)
		}
	}
	if code, _ := f.raw(t, http.MethodGet, "/nowhere", token, nil); code != http.StatusNotFound {
		t.Fatalf("GET an unknown route: %d, want 404", code)
	}
	if got := metricstest.Value(t, "kat_api_request_duration_seconds", labels(route, "404")); got != before+2 {
		t.Errorf("requests of %s answered 404: %v, want %v", route, got, before+2)
	}
	if got := metricstest.Value(t, "kat_api_request_duration_seconds", labels("unmatched", "404")); got < unmatched+1 {
		t.Errorf("unmatched requests: %v, want at least %v", got, unmatched+1)
	}
}
