package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/metrics/metricstest"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// TestBuildFromGit builds a multi-stage app from a subdirectory with build
// arguments, a target stage and a platform, runs the image, and checks the
// records, the log and that a second request is a no-op.
func TestBuildFromGit(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", map[string]string{
		"site/build/Containerfile": "FROM " + baseImage + " AS app\n" +
			"ARG GREETING=none\n" +
			"COPY index.html /www/index.html\n" +
			"RUN echo \"$GREETING\" > /www/greeting.txt\n" +
			"FROM app AS broken\nRUN exit 7\n",
		"site/index.html": "<h1>hello from kat</h1>\n",
		"README.md":       "not in the context\n",
	})
	ns, wl := "default", randomName("bt-app")
	b, recs := testBuilder(t, Config{}, ns, wl)
	built, existing := buildCount(t, metrics.ResultBuilt), buildCount(t, metrics.ResultExisting)
	req := Request{
		Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit,
		Spec: quadlet.BuildSpec{
			BuildContext: "site", DockerfilePath: "build/Containerfile",
			BuildArgs: map[string]string{"GREETING": "hi there"}, TargetStage: "app", Platform: "linux/amd64",
		},
	}
	rec, err := b.Build(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := "kat-local/" + ns + "_" + wl + ":" + commit[:12]; rec.Image != want {
		t.Errorf("image %q, want %q", rec.Image, want)
	}
	if rec.State != api.BuildSucceeded || rec.CacheHit || rec.Existing || !rec.Shallow || rec.ImageID == "" {
		t.Errorf("record %+v: want a shallow, succeeded, non-cached build with an image ID", rec)
	}
	out := podmanOutput(t, storeArgs(), "run", "--rm", "--network", "none", "--name", randomName("bt-run"), rec.Image, "cat", "/www/index.html", "/www/greeting.txt")
	if out != "<h1>hello from kat</h1>\nhi there\n" {
		t.Errorf("image content %q", out)
	}

	hist := recs.History()
	if len(hist) != 2 || hist[0].State != api.BuildBuilding || hist[1].State != api.BuildSucceeded {
		t.Fatalf("records %+v: want Building then Succeeded", hist)
	}
	if hist[1].Node != "node-test" || hist[1].LogPath == "" || !strings.Contains(hist[1].LogTail, "build succeeded") {
		t.Errorf("final record %+v", hist[1])
	}
	log := readLog(t, b, ns, wl, commit[:12])
	for _, want := range []string{"fetching commit " + commit, "--target app", "STEP", "build succeeded"} {
		if !strings.Contains(log, want) {
			t.Errorf("build log lacks %q:\n%s", want, log)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(b.cfg.WorkDir, "src")); len(entries) != 0 {
		t.Errorf("clone left behind: %v", entries)
	}

	again, err := b.Build(context.Background(), req)
	if err != nil || !again.Existing || again.ImageID != rec.ImageID {
		t.Errorf("second build: %+v, %v: want the existing image", again, err)
	}
	if n := b.builds.Load(); n != 1 {
		t.Errorf("%d podman builds, want 1", n)
	}
	if n := len(recs.History()); n != 2 {
		t.Errorf("%d records after the no-op, want 2 (a no-op stores none)", n)
	}
	if b, e := buildCount(t, metrics.ResultBuilt)-built, buildCount(t, metrics.ResultExisting)-existing; b != 1 || e != 1 {
		t.Errorf("kat_build_duration_seconds counted %v built and %v existing, want 1 and 1", b, e)
	}
}

// buildCount is how many builds kat_build_duration_seconds counted with
// result. The build tests are not parallel, so its moves are theirs.
func buildCount(t *testing.T, result string) float64 {
	t.Helper()
	return metricstest.Value(t, "kat_build_duration_seconds", map[string]string{"result": result})
}

func readLog(t *testing.T, b *Builder, ns, wl, commit string) string {
	t.Helper()
	rc, err := b.Log(ns, wl, commit)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestConcurrentRequestsShareOneBuild asks for one commit from several
// goroutines at once: one build, one set of records, the same image.
func TestConcurrentRequestsShareOneBuild(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bt-shared")
	b, recs := testBuilder(t, Config{}, ns, wl)
	req := Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit}

	const callers = 4
	var wg sync.WaitGroup
	results := make([]api.Build, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Go(func() { results[i], errs[i] = b.Build(context.Background(), req) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if results[i].ImageID == "" || results[i].ImageID != results[0].ImageID {
			t.Errorf("caller %d got image %q, caller 0 %q", i, results[i].ImageID, results[0].ImageID)
		}
	}
	if n := b.builds.Load(); n != 1 {
		t.Errorf("%d podman builds for %d concurrent requests, want 1", n, callers)
	}
	building := 0
	for _, r := range recs.History() {
		if r.State == api.BuildBuilding {
			building++
		}
	}
	if building != 1 {
		t.Errorf("%d Building records, want 1", building)
	}
	out := podmanOutput(t, storeArgs(), "run", "--rm", "--network", "none", "--name", randomName("bt-run"), results[0].Image, "cat", "/www/index.html")
	if out != sampleApp["index.html"] {
		t.Errorf("image serves %q", out)
	}
}

// TestBrokenDockerfile checks the typed failure, its log tail and record.
func TestBrokenDockerfile(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("broken", map[string]string{
		"Dockerfile": "FROM " + baseImage + "\nRUN echo building the broken app && exit 3\n",
	})
	ns, wl := "default", randomName("bt-broken")
	b, recs := testBuilder(t, Config{}, ns, wl)
	failures := buildCount(t, metrics.ResultFailure)
	rec, err := b.Build(context.Background(), Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit})
	var fe *FailedError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFailed) {
		t.Fatalf("err %v: want a *FailedError", err)
	}
	if fe.Stage != StageBuild || !fe.Stalled() || fe.Commit != commit {
		t.Errorf("failure %+v: want stage build, stalled", fe)
	}
	for _, want := range []string{"building the broken app", "exit 3", "build failed at stage build"} {
		if !strings.Contains(fe.LogTail, want) {
			t.Errorf("log tail lacks %q:\n%s", want, fe.LogTail)
		}
	}
	if len(fe.LogTail) > tailSize {
		t.Errorf("log tail is %d bytes, want at most %d", len(fe.LogTail), tailSize)
	}
	if rec.State != api.BuildFailed || rec.Error == "" || rec.LogTail != fe.LogTail {
		t.Errorf("record %+v", rec)
	}
	if last, _ := recs.Get(ns, wl, commit); last.State != api.BuildFailed {
		t.Errorf("stored record %+v: want Failed", last)
	}
	if exists, _ := b.cfg.Podman.ImageExists(context.Background(), api.ImageName(ns, wl, commit)); exists {
		t.Error("a failed build left an image")
	}
	if n := buildCount(t, metrics.ResultFailure) - failures; n != 1 {
		t.Errorf("kat_build_duration_seconds counted %v failures, want 1", n)
	}
}

// TestCloneFallbackAndAuth builds a commit below the branch tip from a
// server that refuses fetching by hash and wants basic auth, and checks
// that credentials never show in errors.
func TestCloneFallbackAndAuth(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: false, user: "builder", password: "s3cret-pw"})
	old := repo.Commit("v1", sampleApp)
	repo.Commit("v2", map[string]string{"index.html": "<h1>v2</h1>\n"})
	ns, wl := "default", randomName("bt-auth")
	b, _ := testBuilder(t, Config{}, ns, wl)
	cred := filepath.Join(t.TempDir(), "basic")
	if err := os.WriteFile(cred, []byte("builder:s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("no credentials", func(t *testing.T) {
		_, err := b.Build(ctx, Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: old})
		var fe *FailedError
		if !errors.As(err, &fe) || fe.Stage != StageClone || fe.Stalled() {
			t.Fatalf("err %v: want a transient clone failure", err)
		}
	})
	t.Run("password in the URL is redacted", func(t *testing.T) {
		u := strings.Replace(repo.url, "http://", "http://builder:wrong-pw@", 1)
		_, err := b.Build(ctx, Request{Namespace: ns, Workload: wl, Repository: u, Commit: strings.Repeat("ab", 20)})
		if err == nil {
			t.Fatal("want an error")
		}
		var fe *FailedError
		errors.As(err, &fe)
		if strings.Contains(err.Error(), "wrong-pw") || (fe != nil && strings.Contains(fe.LogTail, "wrong-pw")) {
			t.Errorf("the password leaked: %v\n%s", err, fe.LogTail)
		}
	})
	t.Run("basic auth file, full fetch", func(t *testing.T) {
		rec, err := b.Build(ctx, Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: old, Auth: api.GitAuth{BasicAuthFile: cred}})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Shallow {
			t.Error("record says shallow; the server refuses fetching by hash")
		}
		out := podmanOutput(t, storeArgs(), "run", "--rm", "--network", "none", "--name", randomName("bt-run"), rec.Image, "cat", "/www/index.html")
		if out != sampleApp["index.html"] {
			t.Errorf("image of the old commit serves %q", out)
		}
	})
}

// TestPathsLeavingTheRepository are refused, also through symbolic links,
// before anything is built.
func TestPathsLeavingTheRepository(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "Dockerfile"), []byte("FROM "+baseImage+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit := repo.Commit("links", map[string]string{
		"Dockerfile":       sampleApp["Dockerfile"],
		"index.html":       sampleApp["index.html"],
		"escape":           "->" + outside,
		"app/Dockerfile":   "->" + filepath.Join(outside, "Dockerfile"),
		"app/index.html":   sampleApp["index.html"],
		"nested/up":        "->../..",
		"nested/dockerdir": "->../app",
	})
	ns, wl := "default", randomName("bt-paths")
	b, _ := testBuilder(t, Config{}, ns, wl)
	for _, tc := range []struct {
		name, context, dockerfile string
		stage                     string
	}{
		{"symlinked context", "escape", "Dockerfile", StageContext},
		{"symlinked dockerfile", "app", "Dockerfile", StageContext},
		{"relative symlink up", "nested/up", "Dockerfile", StageContext},
		{"missing context", "nope", "Dockerfile", StageContext},
		{"dotdot context", "../x", "Dockerfile", ""},
		{"dotdot dockerfile", ".", "../Dockerfile", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Build(context.Background(), Request{
				Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit,
				Spec: quadlet.BuildSpec{BuildContext: tc.context, DockerfilePath: tc.dockerfile},
			})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err %v: want ErrInvalid", err)
			}
			var fe *FailedError
			if tc.stage != "" && (!errors.As(err, &fe) || fe.Stage != tc.stage) {
				t.Errorf("err %v: want a failure at stage %s", err, tc.stage)
			}
		})
	}
	if n := b.builds.Load(); n != 0 {
		t.Errorf("%d podman builds ran", n)
	}
}

// TestBuildTimeout stops a build that outlives Config.Timeout, and the
// process of its RUN step with it.
func TestBuildTimeout(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	seconds := fmt.Sprint(3000 + time.Now().UnixNano()%1000) // marks our sleep among the host's processes
	commit := repo.Commit("slow", map[string]string{"Dockerfile": "FROM " + baseImage + "\nRUN sleep " + seconds + "\n"})
	ns, wl := "default", randomName("bt-slow")
	b, _ := testBuilder(t, Config{Timeout: 3 * time.Second}, ns, wl)
	_, err := b.Build(context.Background(), Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit})
	var fe *FailedError
	if !errors.As(err, &fe) || !errors.Is(err, context.DeadlineExceeded) || fe.Stalled() {
		t.Fatalf("err %v: want a timed-out, transient build failure", err)
	}
	if !strings.Contains(fe.LogTail, "timed out") {
		t.Errorf("log tail lacks the timeout:\n%s", fe.LogTail)
	}
	t.Cleanup(func() { // whatever a failure below left running
		for _, p := range processesRunning("sleep " + seconds) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	polltest.UntilErr(t, 15*time.Second, "the RUN step's process ends with the build", func() error {
		if pids := processesRunning("sleep " + seconds); len(pids) > 0 {
			return fmt.Errorf("still running: %v", pids)
		}
		return nil
	})
}

// processesRunning returns the PIDs whose command line is cmdline.
func processesRunning(cmdline string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " ") == cmdline {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCloseStopsBuilds closes the Builder under a running build: the build
// fails as transient, its RUN process goes, and new builds are refused.
func TestCloseStopsBuilds(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	seconds := fmt.Sprint(4000 + time.Now().UnixNano()%1000)
	commit := repo.Commit("slow", map[string]string{"Dockerfile": "FROM " + baseImage + "\nRUN sleep " + seconds + "\n"})
	ns, wl := "default", randomName("bt-close")
	b, _ := testBuilder(t, Config{}, ns, wl)
	req := Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit}
	errc := make(chan error, 1)
	go func() {
		_, err := b.Build(context.Background(), req)
		errc <- err
	}()
	polltest.Until(t, 60*time.Second, "the RUN step starts", func() bool { return len(processesRunning("sleep "+seconds)) > 0 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-errc
	var fe *FailedError
	if !errors.As(err, &fe) || !errors.Is(err, context.Canceled) || fe.Stalled() {
		t.Fatalf("err %v: want a canceled, transient build failure", err)
	}
	if pids := processesRunning("sleep " + seconds); len(pids) != 0 {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		t.Errorf("the RUN step's process outlived Close: %v", pids)
	}
	if _, err := b.Build(context.Background(), req); !errors.Is(err, ErrClosed) {
		t.Errorf("build after Close: %v, want ErrClosed", err)
	}
}
