package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/gitx/gittest"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/webhook"
)

// gitRemote is a repository served over Git smart HTTP by git
// http-backend (gittest), and a working clone that pushes to it.
type gitRemote struct {
	*gittest.Repo
	t   testing.TB
	url string
}

func newGitRemote(t testing.TB) *gitRemote {
	t.Helper()
	return newGitRemoteNamed(t, "config")
}

// newGitRemoteNamed serves NAME.git (a config or an app repository).
func newGitRemoteNamed(t testing.TB, name string) *gitRemote {
	t.Helper()
	r := gittest.NewRepo(t, name)
	return &gitRemote{Repo: r, t: t, url: gittest.Serve(t, r, gittest.ServerOptions{}).RepoURL}
}

// pushWorkload commits default/NAME and pushes it.
func (r *gitRemote) pushWorkload(name string) string {
	r.t.Helper()
	wl := fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  source:
    image: localhost/kat-base:latest
  replicas: 1
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "sleep 3600"]
`, name)
	return r.Commit("add "+name, map[string]string{"default/" + name + "/workload.kat": wl})
}

func waitForWorkload(t *testing.T, c *Cluster, name string) {
	t.Helper()
	polltest.UntilErr(t, 60*time.Second, "workload "+name+" appears", func() error {
		_, ws := getWorkloads(t, c)
		for _, w := range ws {
			if w.Name == name && w.Owner.Kind == "git" {
				return nil
			}
		}
		return fmt.Errorf("%s\n%s", c.Katcall(context.Background(), "get", "sources"), c.Tail(20))
	})
}

// TestGitOpsThroughBinaries follows a config repo served by git http-backend:
// the first commit is applied at start-up, a push announced by a signed
// GitHub webhook is applied, a push followed by katcall sync is applied, and
// a webhook with a bad signature is refused.
func TestGitOpsThroughBinaries(t *testing.T) {
	t.Parallel()
	remote := newGitRemote(t)
	remote.pushWorkload("first")
	dir := t.TempDir()
	secret := []byte("e2e-webhook-secret")
	secretFile := filepath.Join(dir, "webhook.secret")
	if err := os.WriteFile(secretFile, append(secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	clusterKat := filepath.Join(dir, "cluster.kat")
	gitops := fmt.Sprintf("  gitops:\n    repository: %s\n    branch: main\n    pollIntervalSeconds: 3600\n    webhookSecretFile: %s\n", remote.url, secretFile)
	if err := os.WriteFile(clusterKat, append(base, gitops...), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(sharedBinaries(t), filepath.Join(dir, "data"), clusterKat)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(30 * time.Second); err != nil {
			t.Errorf("stop kat-agent: %v", err)
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	waitForWorkload(t, c, "first")

	hook := func(body []byte, sig string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, apiURL(t, c)+"/v1alpha1/webhooks/github", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", sig)
		resp, err := apiHTTPClient(t, c).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	head := remote.pushWorkload("hooked")
	body := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"repository":{"clone_url":%q}}`, head, remote.url)
	if code := hook(body, "sha256="+strings.Repeat("0", 64)); code != http.StatusUnauthorized {
		t.Errorf("webhook with a bad signature: %d, want 401", code)
	}
	if code := hook(body, webhook.Sign(secret, body)); code != http.StatusAccepted {
		t.Fatalf("signed webhook: %d, want 202\n%s", code, c.Tail(10))
	}
	waitForWorkload(t, c, "hooked")

	remote.pushWorkload("synced")
	if r := c.Katcall(context.Background(), "sync", "config"); r.Code != 0 {
		t.Fatalf("katcall sync: %s", r)
	}
	waitForWorkload(t, c, "synced")
	r := c.Katcall(context.Background(), "get", "sources")
	if r.Code != 0 || !strings.Contains(r.Stdout, "config") || !strings.Contains(r.Stdout, "True") {
		t.Errorf("katcall get sources: %s", r)
	}
	if r := c.Katcall(context.Background(), "status"); r.Code != 0 || !strings.Contains(r.Stdout, "SOURCE") || !strings.Contains(r.Stdout, "git:config/default/synced") {
		t.Errorf("katcall status lacks the source or the owner: %s", r)
	}
	if r := c.Katcall(context.Background(), "get", "events"); r.Code != 0 || !strings.Contains(r.Stdout, "source/config") || !strings.Contains(r.Stdout, "default/hooked") {
		t.Errorf("katcall get events lacks the applied commits: %s", r)
	}
	checkAuditShowsWebhooks(t, c, remote.url)
	checkMetrics(t, c, []series{
		{"kat_gitsync_fetch_duration_seconds", map[string]string{"source": "config", "result": "success"}},
		{"kat_gitsync_sync_duration_seconds", map[string]string{"source": "config", "result": "success"}},
		{"kat_webhooks_received_total", map[string]string{"provider": "github"}},
		{"kat_webhooks_accepted_total", map[string]string{"provider": "github", "outcome": "accepted"}},
		{"kat_webhooks_refused_total", map[string]string{"provider": "github", "reason": "bad_signature"}},
		{"kat_reconcile_pass_duration_seconds", map[string]string{"loop": "placement", "result": "success"}},
		{"kat_reconcile_pass_duration_seconds", map[string]string{"loop": "agent"}},
		{"kat_reconcile_latency_seconds", map[string]string{"loop": "placement"}},
		{"kat_instances", map[string]string{"node": c.Node, "phase": "Running"}},
		{"kat_leader", nil},
		{"kat_leader_changes_total", map[string]string{"change": "elected"}},
		{"kat_etcd_is_leader", nil}, {"kat_etcd_has_leader", nil}, {"kat_etcd_members", nil}, {"kat_etcd_db_size_bytes", nil},
		{"go_goroutines", nil}, {"process_resident_memory_bytes", nil},
	})
	ownershipThroughBinaries(t, c, remote)
}

// ownershipThroughBinaries: katcall source set changes one field; katcall
// apply on a Git-owned workload is refused, --force suspends it, katcall
// resume applies Git's version again.
func ownershipThroughBinaries(t *testing.T, c *Cluster, remote *gitRemote) {
	t.Helper()
	ctx := context.Background()
	if r := c.Katcall(ctx, "source", "set", "config", "--interval", "20s"); r.Code != 0 {
		t.Fatalf("katcall source set: %s", r)
	}
	r := c.Katcall(ctx, "get", "sources", "config", "-o", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, `"intervalSeconds": 20`) || !strings.Contains(r.Stdout, remote.url) {
		t.Errorf("after source set --interval 20s: %s", r)
	}
	if r := c.Katcall(ctx, "source", "set", "config", "--interval", "1s"); r.Code == 0 || !strings.Contains(r.Stderr, "intervalSeconds") {
		t.Errorf("source set --interval 1s: %s, want refused naming intervalSeconds", r)
	}

	dir := filepath.Join(remote.Work, "default", "synced")
	wl, err := os.ReadFile(filepath.Join(dir, "workload.kat"))
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "synced")
	if err := os.MkdirAll(edited, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(edited, "workload.kat"), []byte(strings.Replace(string(wl), "replicas: 1", "replicas: 3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.Katcall(ctx, "apply", "-f", edited); r.Code == 0 || !strings.Contains(r.Stderr, "default/synced") {
		t.Fatalf("apply on a Git-owned workload: %s, want refused naming the path", r)
	}
	if r := c.Katcall(ctx, "apply", "-f", edited, "--force"); r.Code != 0 || !strings.Contains(r.Stdout, "suspended") {
		t.Fatalf("apply --force: %s", r)
	}
	if r := c.Katcall(ctx, "resume", "default/synced"); r.Code != 0 {
		t.Fatalf("katcall resume: %s", r)
	}
	polltest.UntilErr(t, 60*time.Second, "Git's version of default/synced applied again", func() error {
		_, ws := getWorkloads(t, c)
		for _, w := range ws {
			if w.Name == "synced" && w.Suspended != nil && !*w.Suspended && w.Generation == 3 {
				return nil
			}
		}
		return errors.New(c.Katcall(ctx, "get", "workloads", "-o", "json").String())
	})
	if r := c.Katcall(ctx, "suspend", "default/first"); r.Code != 0 || !strings.Contains(r.Stdout, "suspended") {
		t.Errorf("katcall suspend: %s", r)
	}
}

type katcallYAML struct {
	Server string `yaml:"server"`
	CA     string `yaml:"certificateAuthorityData"`
}

func readKatcallYAML(t testing.TB, c *Cluster) katcallYAML {
	t.Helper()
	b, err := os.ReadFile(c.KatcallConfig())
	if err != nil {
		t.Fatal(err)
	}
	var k katcallYAML
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	return k
}

func apiURL(t testing.TB, c *Cluster) string {
	t.Helper()
	return readKatcallYAML(t, c).Server
}

// apiHTTPClient trusts the cluster CA, and sends no bearer token.
func apiHTTPClient(t testing.TB, c *Cluster) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(readKatcallYAML(t, c).CA)) {
		t.Fatal("katcall.yaml holds no CA certificate")
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}
