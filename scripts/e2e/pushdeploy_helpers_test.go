package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/webhook"
)

// appDockerfile builds an image that serves index.html with busybox httpd.
const appDockerfile = "FROM localhost/kat-base:latest\nCOPY index.html /www/index.html\n"

// brokenDockerfile fails in its RUN step.
const brokenDockerfile = "FROM localhost/kat-base:latest\nRUN echo about to fail && exit 3\n"

// appWorkloadFiles is a Service built from the app repository at repoURL,
// serving /www with an HTTP health check; cacheRegistry, when set, is
// build.kat's cache.registryPath. Paths are relative to the config
// repository's root. The container port is one of containerPorts free on
// the host now, so that the agent publishes it as is and other tests on the
// machine (which use 8080) do not compete for it.
func appWorkloadFiles(t testing.TB, name, repoURL, cacheRegistry string) map[string]string {
	t.Helper()
	port := containerPort(t)
	cache := ""
	if cacheRegistry != "" {
		cache = "  cache:\n    registryPath: " + cacheRegistry + "\n"
	}
	dir := "default/" + name + "/"
	return map[string]string{
		dir + "workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: 1
  source:
    git:
      repository: %s
      branch: main
  restartPolicy:
    condition: Always
  container:
    command: ["httpd", "-f", "-p", "%d", "-h", "/www"]
`, name, repoURL, port),
		dir + "build.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: BuildDefinition\nspec:\n  buildContext: .\n  dockerfilePath: Dockerfile\n" + cache,
		dir + "VirtualLoadBalancer.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: %d
  healthCheck:
    exec:
      command: ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:%d/"]
    initialDelaySeconds: 1
    periodSeconds: 5
`, port, port),
	}
}

// pushCluster is a single-node cluster that follows a config repository
// (with a webhook secret) whose workload is built from an app repository.
type pushCluster struct {
	*Cluster
	secret []byte
}

// startPushCluster starts a cluster following cfg; podmanStore, when set, is
// a directory for a fresh Podman store of its own (another node's image
// store).
func startPushCluster(t testing.TB, cfg *gitRemote, podmanStore string, extraArgs ...string) *pushCluster {
	t.Helper()
	return startPushClusterFrom(t, "cluster.kat", cfg, podmanStore, extraArgs...)
}

// startPushClusterFrom is startPushCluster with another cluster.kat of
// testdata: the benchmarks' has every setting at its default.
func startPushClusterFrom(t testing.TB, clusterFile string, cfg *gitRemote, podmanStore string, extraArgs ...string) *pushCluster {
	t.Helper()
	dir := t.TempDir()
	secret := []byte("push-to-deploy-secret")
	secretFile := filepath.Join(dir, "webhook.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	base, err := os.ReadFile(filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", clusterFile))
	if err != nil {
		t.Fatal(err)
	}
	clusterKat := filepath.Join(dir, "cluster.kat")
	gitops := fmt.Sprintf("  gitops:\n    repository: %s\n    branch: main\n    pollIntervalSeconds: 3600\n    webhookSecretFile: %s\n", cfg.url, secretFile)
	if err := os.WriteFile(clusterKat, append(base, gitops...), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(sharedBinaries(t), filepath.Join(dir, "data"), clusterKat)
	if err != nil {
		t.Fatal(err)
	}
	c.ExtraArgs = append(c.ExtraArgs, extraArgs...)
	if podmanStore != "" {
		c.ExtraArgs = append(c.ExtraArgs, "--podman-root", filepath.Join(podmanStore, "root"), "--podman-runroot", filepath.Join(podmanStore, "run"))
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the end of %s's kat-agent log:\n%s", c.Node, c.Tail(60))
		}
		if c.Running() {
			if err := c.Stop(30 * time.Second); err != nil {
				t.Errorf("stop kat-agent: %v\n%s", err, c.Tail(20))
			}
		}
		if podmanStore != "" {
			cleanStore(t, podmanStore, c.Node)
			if err := removeNodeNetwork(c.Node); err != nil {
				t.Errorf("remove the test's network: %v", err)
			}
		} else if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	return &pushCluster{Cluster: c, secret: secret}
}

// storeArgs are podman's global arguments for a store under dir.
func storeArgs(dir string) []string {
	return []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run")}
}

// cleanStore removes the node's containers and every image of a private
// store, then unmounts what podman left under dir.
func cleanStore(t testing.TB, dir, node string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := storeArgs(dir)
	if err := removeByFilter(args, "label=kat.node="+node); err != nil {
		t.Errorf("cleanup: remove the containers in %s: %v", dir, err)
	}
	_ = exec.CommandContext(ctx, "podman", append(args, "rmi", "--all", "--force")...).Run()
	// A container whose bundle is under dir but that podman no longer
	// lists (seen when the store was removed under a running container)
	// is deleted through runc itself.
	if out, err := exec.CommandContext(ctx, "runc", "list", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			st, err := exec.CommandContext(ctx, "runc", "state", id).Output()
			if err == nil && strings.Contains(string(st), dir+"/") {
				_ = exec.CommandContext(ctx, "runc", "delete", "-f", id).Run()
			}
		}
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

// removeLocalImages removes the kat-local images of a workload from the
// shared store.
func removeLocalImages(workload string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "podman", "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference=kat-local/default_"+workload).Output()
	if refs := strings.Fields(string(out)); len(refs) > 0 {
		_ = exec.CommandContext(ctx, "podman", append([]string{"rmi", "-f"}, refs...)...).Run()
	}
}

// pushHook sends a signed GitHub push webhook for repoURL's main branch and
// returns the HTTP status.
func (c *pushCluster) pushHook(t testing.TB, repoURL, after string) int {
	t.Helper()
	body := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"repository":{"clone_url":%q}}`, after, repoURL)
	req, err := http.NewRequest(http.MethodPost, apiURL(t, c.Cluster)+"/v1alpha1/webhooks/github", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-Hub-Signature-256", webhook.Sign(c.secret, body))
	resp, err := apiHTTPClient(t, c.Cluster).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// servingPorts returns the host ports of the running instances in d.
func servingPorts(d *api.WorkloadDetail) []int {
	var out []int
	for _, in := range d.Instances {
		if in.Status.Phase == "Running" {
			for _, p := range in.Status.Ports {
				out = append(out, p.HostPort)
			}
		}
	}
	return out
}

// prober watches a workload from outside during a rollout: one goroutine
// keeps learning the published ports of its running instances from the
// workload status API (what katcall status shows) every 25ms, another sends
// GET / to every port learnt so far every 20ms, and at once when a port is
// learnt: the prober's own polling stays out of the time to the first
// answer as far as it can. A round in which no port answers 200 is a gap.
// (Polling without a pause takes enough of a 2-core machine's CPU to slow
// what is measured by half.)
type prober struct {
	mu     sync.Mutex
	ports  map[int]bool
	rounds int
	gaps   []string
	bodies []string // distinct bodies, in the order first seen
	// firstSeen is when each body was first served.
	firstSeen map[string]time.Time
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func startProber(t testing.TB, c *Cluster, ref string) *prober {
	t.Helper()
	d, err := workloadStatus(t, c, ref)
	if err != nil {
		t.Fatal(err)
	}
	p := &prober{ports: map[int]bool{}, firstSeen: map[string]time.Time{}}
	for _, port := range servingPorts(d) {
		p.ports[port] = true
	}
	if len(p.ports) == 0 {
		t.Fatalf("prober: %s has no running instance with a published port", ref)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	client := clientFor(t, c)
	ns, name, _ := strings.Cut(ref, "/")
	learnt := make(chan struct{}, 1) // a new port: probe now
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			if d, err := client.WorkloadStatus(ctx, ns, name); err == nil {
				p.mu.Lock()
				for _, port := range servingPorts(d) {
					if !p.ports[port] {
						p.ports[port] = true
						select {
						case learnt <- struct{}{}:
						default:
						}
					}
				}
				p.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-learnt:
			}
			p.mu.Lock()
			ports := make([]int, 0, len(p.ports))
			for port := range p.ports {
				ports = append(ports, port)
			}
			p.mu.Unlock()
			// Every port, every round: a client may reach any instance,
			// old or new.
			var served []string
			var servedAt []time.Time // when each answer came
			var errs []string
			for _, port := range ports {
				b, err := getBody(ctx, client, port)
				if err == nil {
					served, servedAt = append(served, b), append(servedAt, time.Now())
					continue
				}
				errs = append(errs, err.Error())
			}
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.rounds++
			if len(served) == 0 {
				p.gaps = append(p.gaps, time.Now().Format(time.StampMilli)+": "+strings.Join(errs, "; "))
			}
			for i, body := range served {
				if !slices.Contains(p.bodies, body) {
					p.bodies = append(p.bodies, body)
					p.firstSeen[body] = servedAt[i]
				}
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func getBody(ctx context.Context, client *http.Client, port int) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("port %d: %s", port, resp.Status)
	}
	return strings.TrimSpace(b.String()), err
}

// waitBody waits (up to timeout) until the prober has seen body served.
func (p *prober) waitBody(t testing.TB, body string, timeout time.Duration) {
	t.Helper()
	polltest.UntilErr(t, timeout, fmt.Sprintf("%q served", body), func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if slices.Contains(p.bodies, body) {
			return nil
		}
		return fmt.Errorf("served so far: %q", p.bodies)
	})
}

// servedAt waits (up to timeout) until the prober has seen body served and
// returns when it first saw it, whenever this wait noticed.
func (p *prober) servedAt(t testing.TB, body string, timeout time.Duration) time.Time {
	t.Helper()
	p.waitBody(t, body, timeout)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstSeen[body]
}

// waitRounds waits (up to timeout) until the prober has run n more rounds.
func (p *prober) waitRounds(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	p.mu.Lock()
	want := p.rounds + n
	p.mu.Unlock()
	polltest.Until(t, timeout, fmt.Sprintf("prober: %d rounds", want), func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.rounds >= want
	})
}

// stop ends the probing and returns the rounds, the gaps and the bodies
// seen.
func (p *prober) stop() (int, []string, []string) {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rounds, p.gaps, p.bodies
}

// hopTimeline renders the hops (debug log lines with a "hop" field) the
// agent logged for commit since start, as offsets from start: where the
// time between a push and serving goes.
func hopTimeline(c *Cluster, commit string, start time.Time) string {
	hs, err := hops(c, commit, start)
	if err != nil {
		return err.Error()
	}
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s +%dms", h.name, h.at.Milliseconds()))
	}
	return strings.Join(parts, ", ")
}

// hop is one hop line: its name and when, from a start.
type hop struct {
	name string
	at   time.Duration
}

// hops returns the hops the agent logged for commit since start (and the
// removals of old instances), in the log's order.
func hops(c *Cluster, commit string, start time.Time) ([]hop, error) {
	b, err := os.ReadFile(c.LogPath())
	if err != nil {
		return nil, err
	}
	var out []hop
	for line := range strings.Lines(string(b)) {
		var l struct {
			Time   time.Time `json:"time"`
			Hop    string    `json:"hop"`
			Commit string    `json:"commit"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Hop == "" || l.Time.Before(start.Add(-time.Second)) {
			continue
		}
		if l.Commit != "" && l.Commit != commit && l.Hop != "old-stopped" {
			continue
		}
		out = append(out, hop{name: l.Hop, at: l.Time.Sub(start)})
	}
	return out, nil
}

// between returns the time from the first hop named from to the first
// named to after it, and whether both are there.
func between(hs []hop, from, to string) (time.Duration, bool) {
	i := slices.IndexFunc(hs, func(h hop) bool { return h.name == from })
	if i < 0 {
		return 0, false
	}
	j := slices.IndexFunc(hs[i:], func(h hop) bool { return h.name == to })
	if j < 0 {
		return 0, false
	}
	return hs[i+j].at - hs[i].at, true
}
