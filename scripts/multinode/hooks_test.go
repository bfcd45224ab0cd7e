package multinode

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/harness"
	"kat.dws.rip/kat/webhook"
)

// hookPollSeconds is the poll interval of the config repo (and so of the
// app repositories) in the clusters that test webhooks: far longer than any
// test, so that only a webhook or a new leader's first pass explains a
// sync.
const hookPollSeconds = 3600

// hookRepos are the config repo cluster.kat follows, an app repository a
// workload is built from, and the webhook secret, on the machine's file
// system, which every host shares.
type hookRepos struct {
	config, app *configRepo
	secret      []byte
	secretFile  string
}

func newHookRepos(t *testing.T) *hookRepos {
	t.Helper()
	r := &hookRepos{config: newConfigRepo(t), app: newConfigRepo(t), secret: []byte("multinode-webhook-secret")}
	r.secretFile = filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(r.secretFile, append(r.secret, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// appWorkload is default/app, built from the app repository's main, with
// no replicas: nothing is built, and only the leader's resolution of its
// branch (status.sourceCommit) shows.
func (c *testCluster) applyApp(t *testing.T, r *hookRepos) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"workload.kat": `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: default}
spec:
  type: Service
  replicas: 0
  restartPolicy: {condition: Always}
  source: {git: {repository: "file://` + r.app.bare + `", branch: main}}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`,
		"build.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: BuildDefinition\nspec:\n  buildContext: .\n  dockerfilePath: Dockerfile\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.katcall(t, "apply", "-f", dir)
}

// defaultWorkloads lists namespace default's workloads by name.
func (c *testCluster) defaultWorkloads(ctx context.Context) (map[string]api.Workload, error) {
	out, err := c.Katcall(ctx, c.bin.Katcall, "get", "workloads", "-n", "default", "-o", "json")
	if err != nil {
		return nil, err
	}
	var ws []api.Workload
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		return nil, fmt.Errorf("decode get workloads: %w", err)
	}
	byName := map[string]api.Workload{}
	for _, w := range ws {
		byName[w.Name] = w
	}
	return byName, nil
}

// commitEmpty commits nothing with message msg and pushes it; it returns
// the new head.
func (r *configRepo) commitEmpty(t *testing.T, msg string) string {
	t.Helper()
	if err := r.git("commit", "-q", "--allow-empty", "-m", msg); err != nil {
		t.Fatal(err)
	}
	if err := r.git("push", "-q", "origin", "HEAD:main"); err != nil {
		t.Fatal(err)
	}
	return r.head(t)
}

// head is the bare repository's main.
func (r *configRepo) head(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", r.bare, "rev-parse", "main").Output()
	if err != nil {
		t.Fatalf("git rev-parse main: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// memberHTTP is an HTTPS client of the members' APIs that trusts the
// cluster CA and presents no certificate.
func memberHTTP(t *testing.T, caPEM []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the cluster CA certificate does not parse")
	}
	return &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

func apiURL(h harness.Host, path string) string {
	return "https://" + netip.AddrPortFrom(h.Addr, harness.APIPort).String() + path
}

// postPush sends host h's API a generic webhook of a push to repoURL's main,
// signed with secret, and returns the status code.
func postPush(t *testing.T, cl *http.Client, h harness.Host, repoURL string, secret []byte) int {
	t.Helper()
	body := fmt.Appendf(nil, `{"repository":%q,"ref":"main"}`, repoURL)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, apiURL(h, "/v1alpha1/webhooks/generic"), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Kat-Signature", webhook.Sign(secret, body))
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("webhook to %s: %v", h.Name, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// scrape returns host h's /metrics from its API port, with the admin token.
func scrape(t *testing.T, cl *http.Client, h harness.Host, token string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, apiURL(h, "/metrics"), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := cl.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", h.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", h.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s: %.200s", h.Name, resp.Status, b)
	}
	return string(b), nil
}

// sample finds the value of the sample line that starts with series (a
// name, or a name with its labels) in a scrape.
func sample(scraped, series string) (string, bool) {
	for l := range strings.Lines(scraped) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), series+" "); ok {
			return v, true
		}
	}
	return "", false
}

// blockedThroughMember fails authentication apiserver.DefaultAuthFailures
// times from the machine through a member that does not lead: the leader
// then refuses the machine, also with the right token and also directly,
// while another client of the same member (from the worker's namespace,
// the last host) is served. The machine stays blocked for a minute.
func blockedThroughMember(t *testing.T, c *testCluster, web *http.Client, token string) {
	t.Helper()
	leader, follower := c.leaderIndex(t), -1
	// Right after a member left the quorum, another may be NotReady for a
	// beat or two (its heartbeat timed out during the change).
	polltest.Until(t, 30*time.Second, "a Ready member that does not lead", func() bool {
		for _, n := range c.nodes(t) {
			if n.EtcdMember && !n.Leader && n.Status == "Ready" {
				follower = slices.IndexFunc(c.Hosts, func(h harness.Host) bool { return h.Name == n.Name })
				return true
			}
		}
		return false
	})
	get := func(cl *http.Client, h harness.Host, bearer string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, apiURL(h, "/v1alpha1/nodes"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("GET /v1alpha1/nodes at %s: %v", h.Name, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	member := c.Hosts[follower]
	for i := range apiserver.DefaultAuthFailures {
		if code := get(web, member, "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token #%d through %s: %d, want 401", i+1, member.Name, code)
		}
	}
	if code := get(web, member, token); code != http.StatusTooManyRequests {
		t.Errorf("the right token through %s after %d failures: %d, want 429", member.Name, apiserver.DefaultAuthFailures, code)
	}
	if code := get(web, c.Hosts[leader], token); code != http.StatusTooManyRequests {
		t.Errorf("the right token at the leader %s after %d failures through %s: %d, want 429 (the leader blocks the client's address)", c.Hosts[leader].Name, apiserver.DefaultAuthFailures, member.Name, code)
	}
	// The worker's namespace is another client of the member: its
	// connection is dialled there (on InNetns's thread) and used here.
	worker := c.Hosts[len(c.Hosts)-1]
	var conn net.Conn
	if err := worker.InNetns(func() (err error) {
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(member.Addr, harness.APIPort).String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	tr := web.Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return conn, nil }
	if code := get(&http.Client{Transport: tr, Timeout: 10 * time.Second}, member, token); code != http.StatusOK {
		t.Errorf("the right token from %s's namespace through %s: %d, want 200 (the member itself is not blocked)", worker.Name, member.Name, code)
	}
}

// workerLearnsMembers makes the worker (the host after the members) one
// that joined while the cluster had a single member: its node.json names
// only member x, which does not lead. Restarted, the worker records every
// member's etcd URL there; then x dies and the worker restarts again, and
// must come back Ready through the others. x is restarted as a follower.
func (c *testCluster) workerLearnsMembers(t *testing.T, client func(int) *apiclient.Client, members int) {
	t.Helper()
	worker := members
	w := c.Hosts[worker]
	leader := c.leaderIndex(t)
	x := (leader + 1) % members
	stop := func(i int, sig syscall.Signal) {
		t.Helper()
		if err := c.agents[i].Signal(sig); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := c.agents[i].Wait(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s's kat-agent still runs a minute after %v", c.Hosts[i].Name, sig)
		}
	}
	start := func(i int) time.Time {
		t.Helper()
		a, err := c.StartAgent(t.Context(), i, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents[i] = a
		return time.Now()
	}
	endpoints := func() []string {
		t.Helper()
		var st struct {
			EtcdEndpoints []string `json:"etcdEndpoints"`
		}
		if err := json.Unmarshal(readHostFile(t, w, "node.json"), &st); err != nil {
			t.Fatal(err)
		}
		return st.EtcdEndpoints
	}

	stop(worker, syscall.SIGTERM)
	all := slices.Sorted(slices.Values(endpoints()))
	i := slices.IndexFunc(all, func(u string) bool { return strings.Contains(u, "//"+c.Hosts[x].Addr.String()+":") })
	if len(all) != members || i < 0 {
		t.Fatalf("%s's node.json lists the etcd URLs %v, want the %d members', %s's among them", w.Name, all, members, c.Hosts[x].Name)
	}
	path := filepath.Join(w.DataDir, "node.json")
	var st map[string]any
	if err := json.Unmarshal(readHostFile(t, w, "node.json"), &st); err != nil {
		t.Fatal(err)
	}
	st["etcdEndpoints"] = []string{all[i]}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	start(worker)
	polltest.UntilErr(t, time.Minute, w.Name+" records every member's etcd URL in node.json", func() error {
		if got := slices.Sorted(slices.Values(endpoints())); !slices.Equal(got, all) {
			return fmt.Errorf("node.json lists %v, want %v", got, all)
		}
		return nil
	})

	stop(x, syscall.SIGKILL)
	stop(worker, syscall.SIGTERM)
	restarted := start(worker)
	polltest.UntilErr(t, 2*time.Minute, w.Name+" Ready again with "+c.Hosts[x].Name+" down", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		n, err := client(leader).GetNode(ctx, w.Name)
		if err != nil {
			return err
		}
		if n.Status != api.NodeReady || n.LastHeartbeat == nil || n.LastHeartbeat.Before(restarted) {
			return fmt.Errorf("%s: %s, last heartbeat %v (restarted %s)", w.Name, n.Status, n.LastHeartbeat, restarted.Format(time.RFC3339))
		}
		return nil
	})
	c.restartAsFollower(t, x, client(x), members)
}
