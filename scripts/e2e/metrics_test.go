package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// series names one series of a scrape: a family and some of its labels.
type series struct {
	family string
	labels map[string]string
}

func (s series) String() string { return fmt.Sprintf("%s%v", s.family, s.labels) }

// checkMetrics scrapes /metrics on the cluster's API port (with the admin
// token, and with a metrics certificate katcall metrics-cert issued) and
// agent port (with that certificate, and with the node's) until each
// series of atLeastOne is at least 1 on each, and checks what the ports
// refuse and that etcd's own families stay out. It is called by a test
// whose cluster synced a Git source, took webhooks and ran a workload.
func checkMetrics(t *testing.T, c *Cluster, atLeastOne []series) {
	t.Helper()
	cfg := readKatcallConfig(t, c)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cfg.CA)) {
		t.Fatal("katcall.yaml holds no CA certificate")
	}
	pkiDir := filepath.Join(c.DataDir, "pki")
	nodeCert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "node.crt"), filepath.Join(pkiDir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	if r := c.Katcall(t.Context(), "metrics-cert", "prom", "--out-dir", certDir); r.Code != 0 {
		t.Fatalf("katcall metrics-cert: %s", r)
	}
	scrapeCert, err := tls.LoadX509KeyPair(filepath.Join(certDir, "prom.crt"), filepath.Join(certDir, "prom.key"))
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	agentURL := "https://127.0.0.1:" + strconv.Itoa(c.AgentPort())
	apiPort := cfg.Server + "/metrics"
	agentPort := agentURL + "/metrics"

	if code, _, err := scrapeMetrics(client(), apiPort, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("API port /metrics without token or certificate: %d %v, want 401", code, err)
	}
	// The metrics certificate scrapes, and nothing else.
	for _, u := range []string{agentURL + "/v1alpha1/instances/x/logs", cfg.Server + "/v1alpha1/nodes"} {
		if code, _, err := scrapeMetrics(client(scrapeCert), u, ""); err != nil || code != http.StatusForbidden {
			t.Errorf("GET %s with the metrics certificate: %d %v, want 403", u, code, err)
		}
	}
	ports := []struct {
		name   string
		url    string
		client *http.Client
		bearer string
	}{
		{"API port with the admin token", apiPort, client(), cfg.Token},
		{"API port with the metrics certificate", apiPort, client(scrapeCert), ""},
		{"agent port with the metrics certificate", agentPort, client(scrapeCert), ""},
		{"agent port with the node's certificate", agentPort, client(nodeCert), ""},
	}
	for _, p := range ports {
		polltest.UntilErr(t, 60*time.Second, "the kat_ families on the "+p.name, func() error {
			start := time.Now()
			code, fams, err := scrapeMetrics(p.client, p.url, p.bearer)
			if err != nil || code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %w", p.url, code, err)
			}
			for name := range fams {
				if strings.HasPrefix(name, "etcd_") {
					t.Fatalf("%s serves etcd's own family %s", p.name, name)
				}
			}
			for _, s := range atLeastOne {
				if v := metrics.Sum(fams[s.family], s.labels); v < 1 {
					return fmt.Errorf("%s = %v, want >= 1", s, v)
				}
			}
			t.Logf("scraped the %s: %d families in %s", p.name, len(fams), time.Since(start).Round(time.Millisecond))
			return nil
		})
	}
}

// scrapeMetrics GETs url and parses the Prometheus text it answers.
func scrapeMetrics(client *http.Client, url, bearer string) (int, map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	return resp.StatusCode, fams, err
}
