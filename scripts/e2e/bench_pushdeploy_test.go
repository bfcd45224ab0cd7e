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

// BenchmarkPushToDeploy times push-to-deploy from outside, per new commit
// of an app repository (a Dockerfile FROM localhost/kat-base that copies
// index.html), on nodes with cluster.kat's defaults:
//
//   - push-to-deploy: from the signed webhook sent to the leader until the
//     new page answers on a published port of the workload, as the prober
//     first saw it, against its floor by hand: git clone, podman build and
//     podman run on the same machine until the published port serves the
//     new page;
//   - cache hit: the same webhook sent to a second node, whose store lacks
//     the new commit's image, once the first node has pushed that image to
//     the registry cache, until the API shows its instance of the new
//     commit running (the two stores on one machine share a bridge, so its
//     published port is not probed from outside), against its floors by
//     hand, a registry pull of the image and that pull followed by
//     podman run -d, in a store of its own that holds what the second
//     node's does (the base image's layers).
//
// Each figure and its floor take turns, which goes first alternating, under
// the same watch (the prober, which watches the old instance while the
// deploy by hand runs beside it). It prints each iteration's figures and
// ratio, each push's timeline from the agent's hop lines, and then the
// minimum, median and maximum of each.
func BenchmarkPushToDeploy(b *testing.B) {
	requireBuild(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{}).Host
	app := newGitRemoteNamed(b, "app")
	v0 := app.Commit("v0", map[string]string{"Dockerfile": appDockerfile, "index.html": "v0\n"})
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
	secondClient := clientFor(b, second.Cluster)
	// The floor's store holds what the second node's does: v0's layers.
	floorStore := b.TempDir()
	b.Cleanup(func() { cleanStore(b, floorStore, benchFloorNode) })
	waitCached(b, reg, "cache/"+wl, v0[:12])
	timePullRun(b, floorStore, reg+"/cache/"+wl+":"+v0[:12])

	push := sideBySide{what: "push-to-deploy", kat: "webhook to the new commit served", floor: "git clone + podman build + podman run by hand"}
	hit := sideBySide{what: "cache hit", kat: "webhook to running on a node without the image", floor: "podman pull by hand"}
	hitRun := sideBySide{what: "cache hit", kat: "webhook to running on a node without the image", floor: "podman pull + podman run -d by hand"}
	var overPull, hitBuilds, hitBuildOverPull []float64
	// Round 0 warms up, untimed on both sides, so that no timed push
	// follows the clusters' start (the second one just started beside
	// it) at once.
	i := -1
	for i < 0 || b.Loop() {
		i++
		warmUp := i == 0
		body := fmt.Sprintf("bench %d", i)
		commit := app.Commit(body, map[string]string{"index.html": body + "\n"})
		image := "kat-local/default_" + wl + ":" + commit[:12]
		var byHand, p2d time.Duration
		var pushStart time.Time
		byHandArm := func() {
			waitQuiet(b)
			watch := startProber(b, first.Cluster, ref)
			byHand = manualDeploy(b, app.url, body)
			watch.stop()
		}
		katArm := func() {
			waitQuiet(b)
			p := startProber(b, first.Cluster, ref)
			pushStart = time.Now()
			if code := first.pushHook(b, app.url, commit); code != http.StatusAccepted {
				b.Fatalf("webhook: %d", code)
			}
			p2d = p.servedAt(b, body, 5*time.Minute).Sub(pushStart)
			if _, gaps, _ := p.stop(); len(gaps) > 0 {
				b.Errorf("rollout %d: %d probe rounds found nothing serving", i, len(gaps))
			}
			// The next arm runs on a quiet node: the old container gone
			// (busybox httpd as PID 1 ignores SIGTERM, so its stop takes
			// the agent's stop grace) and the image pushed to the cache
			// (which follows the container's start).
			waitStatus(b, first.Cluster, ref, "old instance gone", func(d *api.WorkloadDetail) bool { return onlyImage(d, image) })
			waitContainers(b, nil, first.Node, wl, 1)
			waitCached(b, reg, "cache/"+wl, commit[:12])
		}
		if i%2 == 1 {
			katArm()
			byHandArm()
		} else {
			byHandArm()
			katArm()
		}
		if warmUp {
			fmt.Fprintf(os.Stderr, "warm-up round, untimed: push-to-deploy %d ms, by hand %d ms\n", p2d.Milliseconds(), byHand.Milliseconds())
		} else {
			push.add(p2d, byHand)
		}
		fmt.Fprintf(os.Stderr, "commit %d, served after %d ms: %s\n", i, p2d.Milliseconds(), hopTimeline(first.Cluster, commit, pushStart))

		var hitTook, pulled, ran time.Duration
		var hitStart time.Time
		hitArm := func() {
			waitQuiet(b)
			hitStart = time.Now()
			if code := second.pushHook(b, app.url, commit); code != http.StatusAccepted {
				b.Fatalf("webhook to the second node: %d", code)
			}
			at, d := untilStatus(b, secondClient, ref, statusPollEvery, 5*time.Minute, func(d *api.WorkloadDetail) bool { return runsImage(d, image) })
			hitTook = at.Sub(hitStart)
			if len(d.Builds) == 0 || d.Builds[0].Commit != commit || !d.Builds[0].CacheHit {
				b.Fatalf("second node's build of %s: %+v, want a cache hit", commit[:12], d.Builds)
			}
			waitStatus(b, second.Cluster, ref, "old instance gone", func(d *api.WorkloadDetail) bool { return onlyImage(d, image) })
			waitContainers(b, storeArgs(secondStore), second.Node, wl, 1)
		}
		pullArm := func() {
			waitQuiet(b)
			stop := pollStatus(secondClient, ref, statusPollEvery)
			pulled, ran = timePullRun(b, floorStore, reg+"/cache/"+wl+":"+commit[:12])
			stop()
		}
		if i%2 == 1 {
			hitArm()
			pullArm()
		} else {
			pullArm()
			hitArm()
		}
		if warmUp {
			fmt.Fprintf(os.Stderr, "warm-up round, untimed: cache hit %d ms, pull by hand %d ms\n", hitTook.Milliseconds(), pulled.Milliseconds())
			continue
		}
		hit.add(hitTook, pulled)
		hitRun.add(hitTook, ran)
		overPull = append(overPull, float64((hitTook - pulled).Milliseconds()))
		// The cache hit's build as the agent waited for it: from its
		// request (the image's presence checked first) to the image.
		hs, err := hops(second.Cluster, commit, hitStart)
		if err != nil {
			b.Fatal(err)
		}
		built, ok := between(hs, "build-start", "build-end")
		if !ok {
			b.Fatalf("second node: no build-start and build-end hops for %s in %+v", commit[:12], hs)
		}
		hitBuilds = append(hitBuilds, float64(built.Milliseconds()))
		hitBuildOverPull = append(hitBuildOverPull, float64((built - pulled).Milliseconds()))
		fmt.Fprintf(os.Stderr, "commit %d, cache hit running after %d ms (%+d ms over the pull by hand; its build %d ms): %s\n",
			i, hitTook.Milliseconds(), (hitTook - pulled).Milliseconds(), built.Milliseconds(), hopTimeline(second.Cluster, commit, hitStart))
		if i == 1 {
			fmt.Fprintf(os.Stderr, "build log of %s on the first node:\n%s\n", commit[:12], first.Katcall(context.Background(), "logs", ref, "--build").Stdout)
			fmt.Fprintf(os.Stderr, "build log of %s on the second node:\n%s\n", commit[:12], second.Katcall(context.Background(), "logs", ref, "--build").Stdout)
		}
	}
	push.report(b, "push")
	hit.report(b, "hit-vs-pull")
	hitRun.report(b, "hit-vs-pull-run")
	if len(overPull) > 0 {
		o, hb, hbo := minMedMax(overPull), minMedMax(hitBuilds), minMedMax(hitBuildOverPull)
		b.ReportMetric(o[1], "hit-over-pull-median-ms")
		b.ReportMetric(o[2], "hit-over-pull-max-ms")
		fmt.Fprintf(os.Stderr, "cache hit over the pull by hand: min %+.0f median %+.0f max %+.0f ms; its build (registry look-up, pull, tag) min %.0f median %.0f max %.0f ms, over the pull min %+.0f median %+.0f max %+.0f ms\n",
			o[0], o[1], o[2], hb[0], hb[1], hb[2], hbo[0], hbo[1], hbo[2])
	}
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

// benchFloorNode labels the containers of the floors run by hand.
const benchFloorNode = "bench-floor"

// timePullRun is a cache hit's floor by hand, in the store under dir: it
// pulls ref from the test registry, then runs it detached with the uid map
// the agent gives a workload, and returns how long the pull and the pull
// and run took. It removes the container and keeps the image, as a node
// keeps what it pulled.
func timePullRun(b testing.TB, dir, ref string) (pull, pullRun time.Duration) {
	b.Helper()
	podman := func(args ...string) {
		b.Helper()
		if out, err := exec.Command("podman", append(storeArgs(dir), args...)...).CombinedOutput(); err != nil {
			b.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	idmap := benchIDMap(b)
	name := "kat-bench-pull-" + randomHex(4)
	start := time.Now()
	podman("pull", "--quiet", "--tls-verify=false", ref)
	pull = time.Since(start)
	podman("run", "--detach", "--name", name, "--label", "kat.node="+benchFloorNode, "--uidmap", idmap, "--gidmap", idmap, ref, "httpd", "-f", "-p", "8080", "-h", "/www")
	pullRun = time.Since(start)
	// removeByFilter retries the rm Podman 4.3 now and then fails on a
	// busy shm mount.
	if err := removeByFilter(storeArgs(dir), "name=^"+name+"$"); err != nil {
		b.Fatal(err)
	}
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
