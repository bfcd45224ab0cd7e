package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	kruntime "kat.dws.rip/kat/runtime"
)

// BenchmarkPushToDeploy measures, per new commit of an app repository (a
// Dockerfile FROM localhost/kat-base that copies index.html):
//
//   - by-hand: git clone, podman build, podman run on the same machine, until
//     the published port serves the new page;
//   - push-to-deploy: from the signed webhook to the leader until a published
//     port of the workload serves the new page (resolve, build, run), as the
//     prober first saw it;
//   - cache-hit: the same webhook to a second node with a fresh image store,
//     once the first node has pushed the image to the registry cache, until
//     the API shows its instance of the new commit running (the two stores
//     on one machine share a bridge, so its published port is not probed
//     from outside); its floors, by hand in a fresh store, are a registry
//     pull of the image (against the cache hit's build: look-up, pull, tag)
//     and that pull followed by podman run -d (against webhook to running).
//
// Both of the first two run while the prober watches the workload, so each
// pays the same for being watched. It reports each in ms and the ratios to
// by-hand.
func BenchmarkPushToDeploy(b *testing.B) {
	requireBuild(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{}).Host
	app := newGitRemoteNamed(b, "app")
	app.Commit("v0", map[string]string{"Dockerfile": appDockerfile, "index.html": "v0\n"})
	cfg := newGitRemote(b)
	wl := "p2db-" + randomHex(3)
	cfg.Commit("add "+wl, appWorkloadFiles(b, wl, app.url, reg+"/cache/"+wl))
	b.Cleanup(func() { removeLocalImages(wl) })
	ref := "default/" + wl
	v0Ready := func(d *api.WorkloadDetail) bool { return d.Status.Ready == 1 && len(d.Instances) == 1 }
	first := startPushClusterFrom(b, "defaults-cluster.kat", cfg, "", "--insecure-registry", reg)
	// The second node, with a fresh store, starts once the first has
	// pushed v0 to the cache: it has no base image to build from.
	waitStatus(b, first.Cluster, ref, "v0 ready", v0Ready)
	secondStore := b.TempDir()
	second := startPushClusterFrom(b, "defaults-cluster.kat", cfg, secondStore, "--insecure-registry", reg)
	waitStatus(b, second.Cluster, ref, "v0 ready", v0Ready)
	var byHand, p2d, hit, hitBuild, pull, pullRun time.Duration
	i := 0
	for b.Loop() {
		i++
		body := fmt.Sprintf("bench %d", i)
		commit := app.Commit(body, map[string]string{"index.html": body + "\n"})
		// Both arms run under the same watch: the prober that looks for
		// the new page (and for gaps) during the push, here watching the
		// old instance while the deploy by hand runs beside it.
		watch := startProber(b, first.Cluster, ref)
		byHand += manualDeploy(b, app.url, body)
		watch.stop()

		p := startProber(b, first.Cluster, ref)
		start := time.Now()
		pushStart := start
		if code := first.pushHook(b, app.url, commit); code != http.StatusAccepted {
			b.Fatalf("webhook: %d", code)
		}
		took := p.servedAt(b, body, 5*time.Minute).Sub(start)
		p2d += took
		if _, gaps, _ := p.stop(); len(gaps) > 0 {
			b.Errorf("rollout %d: %d probe rounds found nothing serving", i, len(gaps))
		}

		image := "kat-local/default_" + wl + ":" + commit[:12]
		// A cache hit needs the first node's push to the cache, which
		// follows its container's start (and so its first answer).
		waitCached(b, reg, "cache/"+wl, commit[:12])
		start = time.Now()
		if code := second.pushHook(b, app.url, commit); code != http.StatusAccepted {
			b.Fatalf("webhook to the second node: %d", code)
		}
		d := waitFast(b, second.Cluster, ref, func(d *api.WorkloadDetail) bool { return runsImage(d, image) })
		hitStart, hitTook := start, time.Since(start)
		hit += hitTook
		// The floors of a cache hit, by hand in a fresh store: pulling
		// the same image from the registry, and pulling and running it.
		pulled, ran := timePullRun(b, reg+"/cache/"+wl+":"+commit[:12])
		pull += pulled
		pullRun += ran
		if len(d.Builds) == 0 || d.Builds[0].Commit != commit || !d.Builds[0].CacheHit {
			b.Fatalf("second node's build of %s: %+v, want a cache hit", commit[:12], d.Builds)
		}
		// The cache hit's build as the agent waited for it: from its
		// request (the image's presence checked first) to the image.
		hs, err := hops(second.Cluster, commit, start)
		if err != nil {
			b.Fatal(err)
		}
		built, ok := between(hs, "build-start", "build-end")
		if !ok {
			b.Fatalf("second node: no build-start and build-end hops for %s in %+v", commit[:12], hs)
		}
		hitBuild += built
		if i == 1 {
			fmt.Fprintf(os.Stderr, "build log of %s on the first node:\n%s\n", commit[:12], first.Katcall(context.Background(), "logs", ref, "--build").Stdout)
			fmt.Fprintf(os.Stderr, "build log of %s on the second node:\n%s\n", commit[:12], second.Katcall(context.Background(), "logs", ref, "--build").Stdout)
		}
		// Measure the next commit on quiet nodes: the old containers are
		// gone (busybox httpd as PID 1 ignores SIGTERM, so each stop takes
		// the agent's stop grace).
		waitStatus(b, first.Cluster, ref, "old instance gone", func(d *api.WorkloadDetail) bool { return onlyImage(d, image) })
		fmt.Fprintf(os.Stderr, "commit %d, served after %d ms: %s\n", i, took.Milliseconds(), hopTimeline(first.Cluster, commit, pushStart))
		fmt.Fprintf(os.Stderr, "commit %d, cache hit running after %d ms: %s\n", i, hitTook.Milliseconds(), hopTimeline(second.Cluster, commit, hitStart))
		waitContainers(b, nil, first.Node, wl, 1)
		waitContainers(b, storeArgs(secondStore), second.Node, wl, 1)
	}
	n := float64(i)
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / n }
	b.ReportMetric(ms(byHand), "ms/by-hand")
	b.ReportMetric(ms(p2d), "ms/push-to-deploy")
	b.ReportMetric(ms(hit), "ms/cache-hit")
	b.ReportMetric(ms(pull), "ms/registry-pull")
	b.ReportMetric(ms(p2d)/ms(byHand), "push/by-hand")
	b.ReportMetric(ms(hit)-ms(pull), "ms/cache-hit-over-pull")
	b.ReportMetric(ms(hitBuild), "ms/cache-hit-build")
	b.ReportMetric(ms(hitBuild)-ms(pull), "ms/cache-hit-build-over-pull")
	b.ReportMetric(ms(pullRun), "ms/registry-pull-run")
	b.ReportMetric(ms(hit)-ms(pullRun), "ms/cache-hit-over-pull-run")
	fmt.Fprintf(os.Stderr, "push to deploy, mean of %d commits: by hand (git clone && podman build && podman run) %.0f ms; webhook to serving %.0f ms (%.2fx)\n",
		i, ms(byHand), ms(p2d), ms(p2d)/ms(byHand))
	fmt.Fprintf(os.Stderr, "cache hit on a fresh store: its build (registry look-up, pull, tag) %.0f ms against a pull by hand %.0f ms (%+.0f ms); "+
		"webhook to running %.0f ms against a pull and podman run -d by hand %.0f ms (%+.0f ms; %+.0f ms over the pull alone)\n",
		ms(hitBuild), ms(pull), ms(hitBuild)-ms(pull), ms(hit), ms(pullRun), ms(hit)-ms(pullRun), ms(hit)-ms(pull))
}

// waitContainers waits (2 minutes at most) until the store (podman global
// args) holds n containers of workload wl on node.
func waitContainers(b testing.TB, store []string, node, wl string, n int) {
	b.Helper()
	polltest.UntilErr(b, 2*time.Minute, fmt.Sprintf("%s: %d containers of %s", node, n, wl), func() error {
		args := append(append([]string(nil), store...), "ps", "-aq", "--filter", "label=kat.node="+node, "--filter", "label=kat.workload="+wl)
		out, err := exec.Command("podman", args...).Output()
		if err == nil && len(strings.Fields(string(out))) == n {
			return nil
		}
		return fmt.Errorf("podman ps: %q, %w", out, err)
	})
}

// waitFast polls the workload's status through the API every 20ms (2
// minutes at most).
func waitFast(b testing.TB, c *Cluster, ref string, cond func(*api.WorkloadDetail) bool) *api.WorkloadDetail {
	b.Helper()
	return waitEvery(b, c, ref, 20*time.Millisecond, cond)
}

// waitEvery polls the workload's status through the API every interval (2
// minutes at most): as often as the figure needs, since each poll takes
// the leader's CPU from what is measured.
func waitEvery(b testing.TB, c *Cluster, ref string, every time.Duration, cond func(*api.WorkloadDetail) bool) *api.WorkloadDetail {
	b.Helper()
	client := clientFor(b, c)
	ns, name, _ := strings.Cut(ref, "/")
	var got *api.WorkloadDetail
	polltest.UntilEvery(b, 2*time.Minute, every, ref, func() bool {
		d, err := client.WorkloadStatus(context.Background(), ns, name)
		if err == nil && cond(d) {
			got = d
			return true
		}
		return false
	})
	return got
}

// runsImage reports whether an instance of the workload runs image.
func runsImage(d *api.WorkloadDetail, image string) bool {
	for _, in := range d.Instances {
		if in.Image == image && in.Status.State == "running" {
			return true
		}
	}
	return false
}

// waitCached waits until the registry at host has repo:tag.
func waitCached(b testing.TB, host, repo, tag string) {
	b.Helper()
	url := "http://" + host + "/v2/" + repo + "/manifests/" + tag
	polltest.UntilEvery(b, 2*time.Minute, 20*time.Millisecond, "cache "+repo+":"+tag, func() bool {
		req, err := http.NewRequest(http.MethodHead, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// timePullRun is a cache hit's floor by hand, in a fresh store: it pulls
// ref from the test registry, then runs it detached with the uid map the
// agent gives a workload, and returns how long the pull and the pull and
// run took. It removes what it made.
func timePullRun(b testing.TB, ref string) (pull, pullRun time.Duration) {
	b.Helper()
	store := b.TempDir()
	const node = "bench-floor"
	podman := func(args ...string) {
		b.Helper()
		if out, err := exec.Command("podman", append(storeArgs(store), args...)...).CombinedOutput(); err != nil {
			b.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	idmap := benchIDMap(b)
	start := time.Now()
	podman("pull", "--quiet", "--tls-verify=false", ref)
	pull = time.Since(start)
	podman("run", "--detach", "--label", "kat.node="+node, "--uidmap", idmap, "--gidmap", idmap, ref, "httpd", "-f", "-p", "8080", "-h", "/www")
	pullRun = time.Since(start)
	cleanStore(b, store, node)
	return pull, pullRun
}

// benchIDMap is a uid map as the agent gives a workload (the top slot: no
// KAT workload has it), for the floors run by hand; not --userns=auto:
// Podman 4.3.1 can hang when an auto create runs beside the agent's
// container operations.
func benchIDMap(b testing.TB) string {
	b.Helper()
	ids, err := kruntime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	if err != nil {
		b.Fatal(err)
	}
	m, _ := ids.Map(int(ids.Slots() - 1))
	return fmt.Sprintf("0:%d:%d", m.HostBase, kruntime.IDMapSize)
}

// manualDeploy is what push-to-deploy replaces: git clone && podman build &&
// podman run, then GET until the new page is served. It returns how long
// that took and removes what it made.
func manualDeploy(b testing.TB, url, body string) time.Duration {
	b.Helper()
	dir := b.TempDir()
	tag := "localhost/kat-bench-manual-" + randomHex(4) + ":latest"
	name := "kat-bench-manual-" + randomHex(4)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	run := func(args ...string) {
		b.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	idmap := benchIDMap(b)
	start := time.Now()
	src := filepath.Join(dir, "src")
	run("git", "clone", "-q", "--depth", "1", url, src)
	cloned := time.Since(start)
	run("podman", "build", "-q", "-t", tag, src)
	built := time.Since(start)
	run("podman", "run", "-d", "--name", name, "--uidmap", idmap, "--gidmap", idmap, "-p", fmt.Sprintf("127.0.0.1:%d:8080", port), tag, "httpd", "-f", "-p", "8080", "-h", "/www")
	ran := time.Since(start)
	client := &http.Client{Timeout: 2 * time.Second}
	polltest.UntilEvery(b, time.Minute, 10*time.Millisecond, fmt.Sprintf("by hand: %q served on port %d", body, port), func() bool {
		got, err := getBody(context.Background(), client, port)
		return err == nil && got == body
	})
	took := time.Since(start)
	fmt.Fprintf(os.Stderr, "by hand: cloned +%dms, built +%dms, ran +%dms, served +%dms\n", cloned.Milliseconds(), built.Milliseconds(), ran.Milliseconds(), took.Milliseconds())
	_ = exec.Command("podman", "rm", "-f", "-t", "0", name).Run()
	_ = exec.Command("podman", "rmi", "-f", tag).Run()
	return took
}
