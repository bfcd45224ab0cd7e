package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/internal/poll"
)

// series names one series of a scrape: a family and some of its labels.
type series struct {
	family string
	labels map[string]string
}

func (s series) String() string { return fmt.Sprintf("%s%v", s.family, s.labels) }

// checkMetrics scrapes /metrics on the cluster's API port (with the admin
// token) and agent port (with the node's certificate) until each series
// of atLeastOne is at least 1 on both, and checks what the ports refuse
// and that etcd's own families stay out. It is called by a test whose
// cluster synced a Git source, took webhooks and ran a workload.
func checkMetrics(t *testing.T, c *Cluster, atLeastOne []series) {
	t.Helper()
	b, err := os.ReadFile(c.KatcallConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Server string `yaml:"server"`
		Token  string `yaml:"token"`
		CA     string `yaml:"certificateAuthorityData"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cfg.CA)) {
		t.Fatal("katcall.yaml holds no CA certificate")
	}
	pkiDir := filepath.Join(c.DataDir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, "node.crt"), filepath.Join(pkiDir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs, MinVersion: tls.VersionTLS12}}}
	}
	apiPort := cfg.Server + "/metrics"
	agentPort := "https://127.0.0.1:" + strconv.Itoa(c.AgentPort()) + "/metrics"

	if code, _, err := scrapeMetrics(client(), apiPort, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("API port /metrics without token or certificate: %d %v, want 401", code, err)
	}
	ports := []struct {
		name   string
		url    string
		client *http.Client
		bearer string
	}{
		{"API port", apiPort, client(), cfg.Token},
		{"agent port", agentPort, client(cert), ""},
	}
	for _, p := range ports {
		poll.UntilErr(t, 60*time.Second, "the kat_ families on the "+p.name, func() error {
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
				if v := seriesValue(fams[s.family], s.labels); v < 1 {
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

// seriesValue sums the series of f whose labels include labels: counters'
// and gauges' values, histograms' counts.
func seriesValue(f *dto.MetricFamily, labels map[string]string) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match != len(labels) {
			continue
		}
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return sum
}
