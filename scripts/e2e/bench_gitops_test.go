package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/webhook"
)

// Sizes and pace of BenchmarkConfigRepoAtScale.
const (
	scaleSmall = 1000
	scaleLarge = 10000
	// scaleCommits one-directory commits per source, enough for a p95 that
	// one slow commit does not decide. The webhook handler takes 60 a
	// minute from one address: webhookSender changes its loopback source
	// address every webhooksPerAddress.
	scaleCommits       = 100
	webhooksPerAddress = 50
	// scalePollEvery is how often the API is asked whether a commit is
	// visible.
	scalePollEvery = 2 * time.Millisecond
	// scaleTimeout bounds every wait of the benchmark.
	scaleTimeout = 5 * time.Minute
)

// BenchmarkConfigRepoAtScale follows config repos of 1,000 and 10,000
// directories through a whole leader: a real kat-agent init (the user's
// defaults, log level info) whose cluster.kat follows a one-directory repo
// and names the webhook secret, then two file:// sources added with katcall
// source set, each a bare repository of N Service directories with replicas
// 0 (no container runs, so Podman is not needed). For each size it reports
// the initial sync (katcall source set until the source's status shows its
// head applied with all N workloads, which the API then lists), then, over 100
// one-directory commits per size (the sizes taking turns), each announced by
// a GitHub push webhook signed with X-Hub-Signature-256, the time from the
// webhook to the changed workload's
// new generation in GET .../workloads/NAME (polled every 2 ms) and to its
// status observing it (the leader's status loop has derived it), p50 and
// p95; the ratio of the p95s; and the leader's RSS and peak RSS after both
// syncs (before the API lists them) and at the end. Run it with -benchtime
// 1x; KAT_AGENT_CPUPROFILE_DIR and KAT_AGENT_HEAPPROFILE_DIR keep the
// agent's profiles.
func BenchmarkConfigRepoAtScale(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("git is not installed")
	}
	for b.Loop() {
		dir := b.TempDir()
		base := newScaleRepo(b, dir, "config", 1)
		sizes := []*scaleRepo{newScaleRepo(b, dir, "k1", scaleSmall), newScaleRepo(b, dir, "k10", scaleLarge)}
		c, secret := startGitOpsCluster(b, dir, base)
		client := clientFor(b, c)
		hook := webhookSender(b, c, secret)
		ctx := context.Background()
		waitSourceApplied(b, client, base)

		for _, r := range sizes {
			start := time.Now()
			if res := c.Katcall(ctx, "source", "set", r.name, "--repo", r.url()); res.Code != 0 {
				b.Fatalf("katcall source set %s: %s", r.name, res)
			}
			waitSourceApplied(b, client, r)
			r.initial = time.Since(start)
		}
		// Before the listings below, which are the API's to pay for.
		synced := readProcMemory(b, c.PID())
		if err := c.SaveHeapProfile("synced"); err != nil {
			b.Error(err)
		}
		for _, r := range sizes {
			checkListed(b, client, r)
		}

		var cpu <-chan error
		if os.Getenv("KAT_AGENT_CPUPROFILE_DIR") == "" {
			cpu = c.SaveCPUProfile("commits-cpu", 10*time.Second)
		}
		// The sizes take turns, one commit each: whatever changes with
		// time (the machine's load, etcd's history and compactions) falls
		// on both alike, not on the size measured second.
		for i := range scaleCommits {
			for _, r := range sizes {
				visible, observed := r.pushOne(b, client, hook, (i*37+11)%r.n)
				r.visible = append(r.visible, visible)
				r.observed = append(r.observed, observed)
			}
		}
		if cpu != nil {
			if err := <-cpu; err != nil {
				b.Error(err)
			}
		}
		end := readProcMemory(b, c.PID())
		if err := c.SaveHeapProfile("end"); err != nil {
			b.Error(err)
		}
		reportScale(b, sizes, synced, end)
	}
}

// scaleRepo is a bare config repository of n workload directories
// apps/{name}-wNNNNN, each a Service with replicas 0, and what was measured
// on it.
type scaleRepo struct {
	name string // the source's name, also the workloads' name prefix
	dir  string
	n    int
	// sleeps holds each directory's current sleep argument: a commit
	// changes one, so the directory's spec hash changes.
	sleeps []int

	initial           time.Duration
	visible, observed []time.Duration
}

func newScaleRepo(tb testing.TB, parent, name string, n int) *scaleRepo {
	tb.Helper()
	r := &scaleRepo{name: name, dir: filepath.Join(parent, name+".git"), n: n, sleeps: make([]int, n)}
	if out, err := exec.Command("git", "init", "--quiet", "--bare", "--initial-branch=main", r.dir).CombinedOutput(); err != nil {
		tb.Fatalf("git init: %v\n%s", err, out)
	}
	var stream bytes.Buffer
	startCommit(&stream, fmt.Sprintf("%d workloads", n), false)
	for i := range n {
		r.sleeps[i] = 1000 + i
		writeFile(&stream, r.path(i), r.workloadKat(i))
	}
	r.fastImport(tb, stream.Bytes())
	return r
}

func (r *scaleRepo) url() string { return "file://" + r.dir }

func (r *scaleRepo) workloadName(i int) string { return fmt.Sprintf("%s-w%05d", r.name, i) }

func (r *scaleRepo) path(i int) string { return "apps/" + r.workloadName(i) + "/workload.kat" }

func (r *scaleRepo) workloadKat(i int) []byte {
	return zeroReplicaService(r.workloadName(i), r.sleeps[i])
}

// commitOne changes directory i in a new commit and returns its hash.
func (r *scaleRepo) commitOne(tb testing.TB, i int) string {
	tb.Helper()
	r.sleeps[i]++
	var stream bytes.Buffer
	startCommit(&stream, "change "+r.workloadName(i), true)
	writeFile(&stream, r.path(i), r.workloadKat(i))
	r.fastImport(tb, stream.Bytes())
	return r.head(tb)
}

// startCommit begins a fast-import commit on main, on top of its current
// head when parent is set.
func startCommit(w *bytes.Buffer, msg string, parent bool) {
	fmt.Fprintf(w, "commit refs/heads/main\ncommitter KAT bench <bench@kat.invalid> %d +0000\ndata %d\n%s\n", time.Now().Unix(), len(msg), msg)
	if parent {
		w.WriteString("from refs/heads/main^0\n")
	}
}

func writeFile(w *bytes.Buffer, path string, data []byte) {
	fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", path, len(data))
	w.Write(data)
	w.WriteByte('\n')
}

func (r *scaleRepo) fastImport(tb testing.TB, stream []byte) {
	tb.Helper()
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir, cmd.Stdin = r.dir, bytes.NewReader(stream)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("git fast-import in %s: %v\n%s", r.dir, err, out)
	}
}

func (r *scaleRepo) head(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command("git", "-C", r.dir, "rev-parse", "refs/heads/main").Output()
	if err != nil {
		tb.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startGitOpsCluster starts kat-agent init following base through cluster.kat
// spec.gitops, with a webhook secret, at the user's default log level.
func startGitOpsCluster(b *testing.B, dir string, base *scaleRepo) (*Cluster, []byte) {
	b.Helper()
	secret := []byte("scale-webhook-secret")
	secretFile := filepath.Join(dir, "webhook.secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		b.Fatal(err)
	}
	clusterKat, err := os.ReadFile(filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		b.Fatal(err)
	}
	clusterKat = fmt.Appendf(clusterKat, "  gitops:\n    repository: %s\n    branch: main\n    webhookSecretFile: %s\n", base.url(), secretFile)
	path := filepath.Join(dir, "cluster.kat")
	if err := os.WriteFile(path, clusterKat, 0o600); err != nil {
		b.Fatal(err)
	}
	c, err := NewCluster(sharedBinaries(b), filepath.Join(dir, "data"), path)
	if err != nil {
		b.Fatal(err)
	}
	c.ExtraArgs = []string{"--log-level", "info"}
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := c.Stop(60 * time.Second); err != nil {
			b.Errorf("stop kat-agent: %v\n%s", err, c.Tail(20))
		}
		if err := RemoveNodeContainers(c.Node); err != nil { // and its network
			b.Errorf("clean up: %v", err)
		}
	})
	return c, secret
}

// waitSourceApplied waits until source r applied its head with all its
// workloads: they are in etcd, so the API shows them.
func waitSourceApplied(b *testing.B, client *apiclient.Client, r *scaleRepo) {
	b.Helper()
	head := r.head(b)
	polltest.UntilErr(b, scaleTimeout, "source "+r.name+" applies "+head[:12], func() error {
		src, err := client.GetSource(context.Background(), r.name)
		switch {
		case err != nil:
			return err
		case src.Status.AppliedCommit != head || src.Status.Workloads != r.n:
			return fmt.Errorf("applied %.12s with %d workloads (last error %q)", src.Status.AppliedCommit, src.Status.Workloads, src.Status.LastError)
		}
		return nil
	})
}

// checkListed fails unless the API lists all of source r's workloads.
func checkListed(b *testing.B, client *apiclient.Client, r *scaleRepo) {
	b.Helper()
	ws, err := client.ListWorkloads(context.Background(), "default")
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, w := range ws {
		if w.Owner.Source == r.name {
			n++
		}
	}
	if n != r.n {
		b.Fatalf("the API lists %d workloads of source %s, want %d", n, r.name, r.n)
	}
}

// webhookSender returns a function that posts a GitHub push webhook for a
// repository and commit, signed with secret, and fails unless it is
// accepted.
func webhookSender(b *testing.B, c *Cluster, secret []byte) func(r *scaleRepo, head string) {
	b.Helper()
	base := apiHTTPClient(b, c)
	url := apiURL(b, c) + "/v1alpha1/webhooks/github"
	var hc *http.Client
	sent := 0
	return func(r *scaleRepo, head string) {
		if sent%webhooksPerAddress == 0 {
			// From 127.0.0.2, 127.0.0.3, ...: loopback addresses of this
			// machine, each under the handler's per-address rate.
			local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+sent/webhooksPerAddress))}
			tr := base.Transport.(*http.Transport).Clone()
			tr.DialContext = (&net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}).DialContext
			hc = &http.Client{Timeout: base.Timeout, Transport: tr}
		}
		sent++
		body := fmt.Appendf(nil, `{"ref":"refs/heads/main","after":%q,"repository":{"clone_url":%q}}`, head, r.url())
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", webhook.Sign(secret, body))
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatalf("webhook: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("webhook for %s: %s, want 202", r.name, resp.Status)
		}
	}
}

// pushOne commits a change of directory i, announces it by webhook and
// returns the time until the API shows the workload's new generation, and
// until its status observes it. It returns once the source applied the
// commit, so the next commit starts from a leader at rest.
func (r *scaleRepo) pushOne(b *testing.B, client *apiclient.Client, hook func(*scaleRepo, string), i int) (visible, observed time.Duration) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scaleTimeout)
	defer cancel()
	name := r.workloadName(i)
	before, err := client.GetWorkload(ctx, "default", name)
	if err != nil {
		b.Fatalf("get %s: %v", name, err)
	}
	want := before.Generation + 1
	head := r.commitOne(b, i)
	start := time.Now()
	hook(r, head)
	t := time.NewTicker(scalePollEvery)
	defer t.Stop()
	for observed == 0 {
		w, err := client.GetWorkload(ctx, "default", name)
		if err != nil {
			b.Fatalf("get %s: %v", name, err)
		}
		if visible == 0 && w.Generation >= want {
			visible = time.Since(start)
		}
		if w.Status.ObservedGeneration >= want {
			observed = time.Since(start)
			if visible == 0 {
				visible = observed
			}
			break
		}
		select {
		case <-ctx.Done():
			b.Fatalf("generation %d of %s not visible and observed within %s (visible after %s)", want, name, scaleTimeout, visible)
		case <-t.C:
		}
	}
	if err := poll.Wait(ctx, func() (bool, error) {
		src, err := client.GetSource(ctx, r.name)
		return err == nil && src.Status.AppliedCommit == head, err
	}); err != nil {
		b.Fatalf("source %s did not apply %.12s: %v", r.name, head, err)
	}
	return visible, observed
}

// procMemory is a process's resident set size now and at its peak, and
// what the resident set is now: anonymous memory (the Go heap, etcd's
// index) and file pages, of which the executable's and etcd's
// memory-mapped database's.
type procMemory struct{ rss, peak, anon, file, exe, db int64 }

func readProcMemory(tb testing.TB, pid int) procMemory {
	tb.Helper()
	var m procMemory
	for _, f := range []struct {
		name string
		v    *int64
	}{{"VmRSS", &m.rss}, {"VmHWM", &m.peak}, {"RssAnon", &m.anon}, {"RssFile", &m.file}} {
		v, err := procStatusBytes(pid, f.name)
		if err != nil {
			tb.Fatal(err)
		}
		*f.v = v
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		tb.Fatal(err)
	}
	byPath, err := residentByMapping(pid)
	if err != nil {
		tb.Fatal(err)
	}
	m.exe = byPath[exe]
	for p, n := range byPath {
		if strings.HasSuffix(p, "/member/snap/db") {
			m.db += n
		}
	}
	return m
}

// residentByMapping sums /proc/PID/smaps's Rss by mapped file path.
func residentByMapping(pid int) (map[string]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	path := ""
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			// A mapping's header: range, perms, offset, device, inode[, path].
			path = ""
			if len(f) >= 6 {
				path = f[5]
			}
		case len(f) == 3 && f[0] == "Rss:" && path != "":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("smaps of %d: %q: %w", pid, line, err)
			}
			out[path] += kb << 10
		}
	}
	return out, nil
}

func (m procMemory) String() string {
	return fmt.Sprintf("%.1f MiB (peak %.1f MiB; anonymous %.1f MiB, file %.1f MiB: executable %.1f MiB, etcd database %.1f MiB)",
		mib(m.rss), mib(m.peak), mib(m.anon), mib(m.file), mib(m.exe), mib(m.db))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentile returns the p-th percentile (0-100) of ds, nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

// reportScale prints the table and reports the metrics.
func reportScale(b *testing.B, sizes []*scaleRepo, synced, end procMemory) {
	b.Helper()
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-7s %12s %12s %12s %12s %13s %13s\n", "dirs", "initial-sync", "visible-p50", "visible-p95", "visible-max", "observed-p50", "observed-p95")
	for _, r := range sizes {
		fmt.Fprintf(&table, "%-7d %12s %12s %12s %12s %13s %13s\n", r.n, r.initial.Round(time.Millisecond),
			percentile(r.visible, 50).Round(100*time.Microsecond), percentile(r.visible, 95).Round(100*time.Microsecond),
			percentile(r.visible, 100).Round(100*time.Microsecond),
			percentile(r.observed, 50).Round(100*time.Microsecond), percentile(r.observed, 95).Round(100*time.Microsecond))
		k := fmt.Sprintf("%dk", r.n/1000)
		b.ReportMetric(r.initial.Seconds(), "initial-sync-"+k+"-s")
		b.ReportMetric(ms(percentile(r.visible, 50)), "p50-"+k+"-ms")
		b.ReportMetric(ms(percentile(r.visible, 95)), "p95-"+k+"-ms")
		b.ReportMetric(ms(percentile(r.observed, 95)), "observed-p95-"+k+"-ms")
	}
	small, large := sizes[0], sizes[len(sizes)-1]
	ratio := float64(percentile(large.visible, 95)) / float64(max(1, percentile(small.visible, 95)))
	fmt.Fprintf(&table, "p95(%d)/p95(%d): %.2f over %d webhooks each (visible: the new generation in GET; observed: in its status)\n",
		large.n, small.n, ratio, scaleCommits)
	fmt.Fprintf(&table, "leader RSS after both syncs %s; after the commits %s", synced, end)
	b.ReportMetric(ratio, "p95-ratio")
	b.ReportMetric(mib(synced.rss), "rss-synced-MiB")
	b.ReportMetric(mib(end.peak), "rss-peak-MiB")
	b.Log(table.String())
}
