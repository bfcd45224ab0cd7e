package build

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// The benchmarks compare a Builder's build of the sample app (clone of the
// exact commit, podman build) with `git clone && podman build` by hand on
// the same repository, also for an app with a RUN step (which the Builder
// runs in a user namespace, by hand it runs as host root), and time a cache
// hit in a fresh store. Each iteration first removes the image; podman's
// layer cache serves both sides alike. Run:
// go test -run '^$' -bench . -benchtime 5x ./build

// runApp is sampleApp with a RUN step.
var runApp = map[string]string{
	"Dockerfile": sampleApp["Dockerfile"] + "RUN id -u > /www/uid && touch /marker\n",
	"index.html": sampleApp["index.html"],
}

func BenchmarkBuilderBuild(b *testing.B) { benchBuilder(b, sampleApp) }

func BenchmarkBuilderBuildRunStep(b *testing.B) { benchBuilder(b, runApp) }

func benchBuilder(b *testing.B, app map[string]string) {
	b.Helper()
	needPodman(b)
	repo := newAppRepo(b, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", app)
	ns, wl := "default", randomName("bb-app")
	bld, _ := testBuilder(b, Config{}, ns, wl)
	req := Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit}
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		removeImages(b, bld.pm, ns, wl)
		b.StartTimer()
		if rec, err := bld.Build(ctx, req); err != nil || rec.Existing {
			b.Fatalf("build: %+v, %v", rec, err)
		}
	}
}

func BenchmarkManualCloneAndBuild(b *testing.B) { benchManual(b, sampleApp) }

func BenchmarkManualCloneAndBuildRunStep(b *testing.B) { benchManual(b, runApp) }

func benchManual(b *testing.B, app map[string]string) {
	b.Helper()
	needPodman(b)
	repo := newAppRepo(b, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", app)
	ns, wl := "default", randomName("bb-manual")
	image := api.ImageName(ns, wl, commit)
	pm := newPodman(runtime.NewPodman(store))
	b.Cleanup(func() { removeImages(b, pm, ns, wl) })
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			b.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	for b.Loop() {
		b.StopTimer()
		removeImages(b, pm, ns, wl)
		dir := filepath.Join(b.TempDir(), "src")
		b.StartTimer()
		run("git", "clone", "-q", repo.url, dir)
		run("git", "-C", dir, "checkout", "-q", commit)
		run("podman", append(storeArgs(), "build", "-q", "-t", image, dir)...)
	}
}

func BenchmarkCacheHit(b *testing.B) {
	needPodman(b)
	reg := testenv.StartRegistry(b, testenv.RegistryOptions{})
	repo := newAppRepo(b, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bb-cache")
	req := Request{
		Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit,
		Spec: quadlet.BuildSpec{Cache: &quadlet.BuildCache{RegistryPath: reg.Host + "/cache/" + wl}},
	}
	ctx := context.Background()
	first, _ := testBuilder(b, Config{InsecureRegistries: []string{reg.Host}}, ns, wl)
	if _, err := first.Build(ctx, req); err != nil {
		b.Fatal(err)
	}
	store := freshStore(b)
	bld, _ := testBuilder(b, Config{Podman: runtime.NewPodman(store), InsecureRegistries: []string{reg.Host}}, ns, wl)
	for b.Loop() {
		b.StopTimer()
		removeImages(b, bld.pm, ns, wl)
		b.StartTimer()
		if rec, err := bld.Build(ctx, req); err != nil || !rec.CacheHit {
			b.Fatalf("build: %+v, %v", rec, err)
		}
	}
}
