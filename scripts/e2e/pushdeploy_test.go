package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// requireBuild skips the test unless podman, localhost/kat-base and git
// are there.
func requireBuild(t testing.TB) {
	t.Helper()
	requirePodman(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: run scripts/install-prereqs.sh (as root) to run this test")
	}
}

func hasCondition(d *api.WorkloadDetail, typ, status string) *api.Condition {
	for _, c := range d.Status.Conditions {
		if c.Type == typ && c.Status == status {
			return &c
		}
	}
	return nil
}

// onlyImage reports whether every instance of d runs image and is ready.
func onlyImage(d *api.WorkloadDetail, image string) bool {
	if len(d.Instances) != d.Status.Desired || d.Status.Ready != d.Status.Desired {
		return false
	}
	for _, in := range d.Instances {
		if in.Image != image || in.Status.Phase != "Running" {
			return false
		}
	}
	return true
}

// TestPushToDeploy proves issue 5's "Done when" through the real binaries,
// Podman and a Git server: a workload of a config repository built from an
// app repository (Dockerfile FROM localhost/kat-base) is built and served;
// a new commit announced by a signed webhook becomes a new image tag and
// replaces the instance with no moment where nothing serves; a broken
// Dockerfile gives BuildFailed (with the log tail, and katcall logs --build
// shows the log) while the old instance keeps serving.
func TestPushToDeploy(t *testing.T) {
	t.Parallel()
	requireBuild(t)
	ctx := context.Background()
	app := newGitRemoteNamed(t, "app")
	c1 := app.Commit("v1", map[string]string{"Dockerfile": appDockerfile, "index.html": "v1\n"})
	cfg := newGitRemote(t)
	wl := "p2d-" + randomHex(3)
	cfg.Commit("add "+wl, appWorkloadFiles(t, wl, app.url, ""))
	t.Cleanup(func() { removeLocalImages(wl) })
	c := startPushCluster(t, cfg, "")
	ref := "default/" + wl
	image := func(commit string) string { return "kat-local/default_" + wl + ":" + commit[:12] }

	d := waitStatus(t, c.Cluster, ref, "the first commit built and ready", func(d *api.WorkloadDetail) bool {
		return d.Status.SourceCommit == c1 && onlyImage(d, image(c1))
	})
	if len(d.Builds) != 1 || d.Builds[0].State != "Succeeded" || d.Builds[0].CacheHit || d.Builds[0].Node != c.Node {
		t.Errorf("build records %+v: want one build by %s", d.Builds, c.Node)
	}

	// A new commit, announced by a webhook: new image, new instance, and
	// something serves at every moment.
	p := startProber(t, c.Cluster, ref)
	c2 := app.Commit("v2", map[string]string{"index.html": "v2\n"})
	start := time.Now()
	if code := c.pushHook(t, app.url, c2); code != http.StatusAccepted {
		t.Fatalf("webhook for the app repository: %d, want 202\n%s", code, c.Tail(20))
	}
	p.waitBody(t, "v2", 3*time.Minute)
	t.Logf("webhook to serving the new commit: %s", time.Since(start).Round(time.Millisecond))
	waitStatus(t, c.Cluster, ref, "only the new commit's instance", func(d *api.WorkloadDetail) bool {
		return d.Status.SourceCommit == c2 && onlyImage(d, image(c2))
	})
	if err := exec.Command("podman", "image", "exists", image(c2)).Run(); err != nil {
		t.Errorf("image %s: %v", image(c2), err)
	}
	rounds, gaps, bodies := p.stop()
	t.Logf("rollout: %d probe rounds, bodies %q", rounds, bodies)
	if len(gaps) > 0 || rounds < 10 {
		t.Fatalf("rollout: %d of %d probe rounds found nothing serving (want none of at least 10):\n%s", len(gaps), rounds, strings.Join(gaps, "\n"))
	}

	// A broken Dockerfile: BuildFailed, and the running version is left
	// alone.
	p = startProber(t, c.Cluster, ref)
	c3 := app.Commit("broken", map[string]string{"Dockerfile": brokenDockerfile})
	if code := c.pushHook(t, app.url, c3); code != http.StatusAccepted {
		t.Fatalf("webhook for the broken commit: %d, want 202", code)
	}
	d = waitStatus(t, c.Cluster, ref, "BuildFailed", func(d *api.WorkloadDetail) bool {
		return hasCondition(d, "BuildFailed", "True") != nil
	})
	if cond := hasCondition(d, "BuildFailed", "True"); !strings.Contains(cond.Message, "exit 3") || !strings.Contains(cond.Message, c3[:12]) {
		t.Errorf("BuildFailed message lacks the log tail or the commit: %q", cond.Message)
	}
	running := 0
	for _, in := range d.Instances {
		if in.Image == image(c2) && in.Status.Phase == "Running" {
			running++
		}
	}
	if running != 1 {
		t.Errorf("after the failed build: %d running instances of the previous commit, want 1: %+v", running, d.Instances)
	}
	r := c.Katcall(ctx, "status", ref, "-o", "json")
	var raw map[string]any
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &raw) != nil || !strings.Contains(r.Stdout, `"BuildFailed"`) {
		t.Errorf("katcall status -o json lacks BuildFailed: %s", r)
	}
	if r := c.Katcall(ctx, "status", ref); r.Code != 0 || !strings.Contains(r.Stdout, "Commit:     "+c3[:12]) ||
		!strings.Contains(r.Stdout, "BuildFailed=True") || !strings.Contains(r.Stdout, "BUILD") {
		t.Errorf("katcall status: %s", r)
	}
	if r := c.Katcall(ctx, "logs", ref, "--build", "--commit", c3[:12]); r.Code != 0 || !strings.Contains(r.Stdout, "about to fail") {
		t.Errorf("katcall logs --build --commit: %s", r)
	}
	if r := c.Katcall(ctx, "logs", ref, "--build", "--commit", c2); r.Code != 0 || !strings.Contains(r.Stdout, "COPY index.html") {
		t.Errorf("katcall logs --build of the good commit: %s", r)
	}
	if r := c.Katcall(ctx, "get", "events"); r.Code != 0 || !strings.Contains(r.Stdout, "BuildFailed") {
		t.Errorf("katcall get events lacks BuildFailed: %s", r)
	}
	// Keep probing a little after the failure: the old version still serves.
	p.waitRounds(t, 40, time.Minute)
	rounds, gaps, bodies = p.stop()
	if len(gaps) > 0 || len(bodies) != 1 || bodies[0] != "v2" {
		t.Fatalf("after the failed build: %d of %d rounds found nothing serving, bodies %q; want v2 throughout:\n%s",
			len(gaps), rounds, bodies, strings.Join(gaps, "\n"))
	}

	// A webhook that names neither a config source nor an app repository is
	// a 404.
	if code := c.pushHook(t, "https://git.example.com/unknown.git", c3); code != http.StatusNotFound {
		t.Errorf("webhook for an unknown repository: %d, want 404", code)
	}
}
