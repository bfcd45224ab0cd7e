package build

import (
	"context"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// TestRegistryCache builds and pushes to a real registry on loopback that
// wants credentials from Podman's auth file, then asks a fresh image store
// (another node) for the same commit: a cache hit, no build, and the image
// runs there.
func TestRegistryCache(t *testing.T) {
	needPodman(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{Auth: true})
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bt-cache")
	req := Request{
		Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit,
		Spec: quadlet.BuildSpec{Cache: &quadlet.BuildCache{RegistryPath: reg.Host + "/cache/" + wl}},
	}
	ctx := context.Background()

	first, firstRecs := testBuilder(t, Config{Node: "node-a", InsecureRegistries: []string{reg.Host}, AuthFile: reg.AuthFile}, ns, wl)
	rec, err := first.Build(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The push goes on after Build returned: the image is there already.
	first.settle()
	if stored, _ := firstRecs.Get(ns, wl, commit); rec.CacheHit || len(stored.Warnings) != 0 || first.builds.Load() != 1 {
		t.Fatalf("first build %+v, stored %+v (%d builds): want a built image pushed without warnings", rec, stored, first.builds.Load())
	}
	log := readLog(t, first, ns, wl, commit)
	if !strings.Contains(log, "cache miss") || !strings.Contains(log, "podman push") {
		t.Errorf("first build log lacks the cache miss or the push:\n%s", log)
	}
	if got, _ := firstRecs.Get(ns, wl, commit); got.State != api.BuildSucceeded {
		t.Errorf("stored record %+v", got)
	}

	store := freshStore(t)
	second, secondRecs := testBuilder(t, Config{
		Node: "node-b", Podman: runtime.NewPodman(store), InsecureRegistries: []string{reg.Host}, AuthFile: reg.AuthFile,
	}, ns, wl)
	start := time.Now()
	hit, err := second.Build(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cache hit in a fresh store took %s (the build took %s)", time.Since(start).Round(time.Millisecond), rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond))
	if !hit.CacheHit || second.builds.Load() != 0 || hit.Node != "node-b" || hit.State != api.BuildSucceeded {
		t.Fatalf("second node: %+v (%d builds): want a cache hit and no build", hit, second.builds.Load())
	}
	if hit.ImageID != rec.ImageID {
		t.Errorf("cache hit's image ID %q, want the built image's %q", hit.ImageID, rec.ImageID)
	}
	if got, _ := secondRecs.Get(ns, wl, commit); !got.CacheHit {
		t.Errorf("stored record %+v: want cacheHit", got)
	}
	second.settle() // the registry's name is dropped after Build returned
	global := runtime.NewPodman(store).GlobalArgs()
	if out := podmanOutput(t, global, "run", "--rm", "--network", "none", "--name", randomName("bt-run"), hit.Image, "cat", "/www/index.html"); out != sampleApp["index.html"] {
		t.Errorf("cached image serves %q", out)
	}
	if names := podmanOutput(t, global, "images", "--format", "{{.Repository}}:{{.Tag}}"); strings.Contains(names, reg.Host) {
		t.Errorf("the registry name stayed in the store:\n%s", names)
	}

	// Without the credentials, the cache is a miss and the push a warning.
	anon := req
	anon.Commit = repo.Commit("v2", map[string]string{"index.html": "<h1>v2</h1>\n"})
	third, thirdRecs := testBuilder(t, Config{Node: "node-c", InsecureRegistries: []string{reg.Host}}, ns, wl)
	if _, err := third.Build(ctx, anon); err != nil {
		t.Fatal(err)
	}
	third.settle()
	rec3, _ := thirdRecs.Get(ns, wl, anon.Commit)
	if rec3.CacheHit || len(rec3.Warnings) != 1 || !strings.Contains(rec3.Warnings[0], "push to cache") {
		t.Errorf("build without registry credentials: %+v: want a build with a push warning", rec3)
	}
}

// TestPushFailureIsAWarning builds with an unreachable cache registry.
func TestPushFailureIsAWarning(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bt-nopush")
	dead := "127.0.0.1:1" // nothing listens on port 1
	b, recs := testBuilder(t, Config{InsecureRegistries: []string{dead}, Timeout: time.Minute}, ns, wl)
	rec, err := b.Build(context.Background(), Request{
		Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit, CacheImage: dead + "/cache/app",
	})
	if err != nil || rec.State != api.BuildSucceeded || rec.CacheHit {
		t.Fatalf("Build = %+v, %v: want a success", rec, err)
	}
	// The push fails after Build returned: the stored record says so.
	b.settle()
	if rec, _ = recs.Get(ns, wl, commit); rec.State != api.BuildSucceeded || len(rec.Warnings) != 1 || !strings.Contains(rec.Warnings[0], "push to cache") {
		t.Errorf("record %+v: want a success with a push warning", rec)
	}
}

// TestHousekeeping keeps the newest images of a workload and spares an
// older one that a container uses.
func TestHousekeeping(t *testing.T) {
	needPodman(t)
	ns, wl := "default", randomName("bt-keep")
	b, _ := testBuilder(t, Config{KeepImages: 2}, ns, wl)
	ctx := context.Background()
	dir := t.TempDir()
	writeFile(t, dir+"/Dockerfile", "FROM "+baseImage+"\nARG N\nLABEL n=$N\n")
	var names []string
	for i := range 5 {
		// Distinct creation times without waiting: --timestamp.
		name := api.ImageName(ns, wl, strings.Repeat(string(rune('a'+i)), 12))
		podmanOutput(t, storeArgs(), "build", "--quiet", "--no-cache", "--timestamp", strconvItoa(1_700_000_000+i*60),
			"--build-arg", "N="+wl+strconvItoa(i), "--tag", name, dir)
		names = append(names, name)
	}
	other := api.ImageName(ns, randomName("bt-other"), strings.Repeat("f", 12))
	podmanOutput(t, storeArgs(), "tag", names[0], other)
	t.Cleanup(func() { podmanOutput(t, storeArgs(), "rmi", "--force", other) })
	ctr := randomName("bt-user")
	podmanOutput(t, storeArgs(), "create", "--name", ctr, names[1], "true")
	t.Cleanup(func() { podmanOutput(t, storeArgs(), "rm", "--force", ctr) })

	removed, err := b.Prune(ctx, ns, wl)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{names[2], names[0]} // newest first; names[1] is in use
	if strings.Join(removed, " ") != strings.Join(want, " ") {
		t.Errorf("removed %v, want %v", removed, want)
	}
	left := podmanOutput(t, storeArgs(), "images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", "reference="+api.ImageRepository(ns, wl))
	for i, n := range names {
		kept := i != 0 && i != 2
		if got := strings.Contains(left, n); got != kept {
			t.Errorf("%s present=%t, want %t; images:\n%s", n, got, kept, left)
		}
	}
	if exists, _ := b.cfg.Podman.ImageExists(ctx, other); !exists {
		t.Errorf("%s of another workload was removed", other)
	}
}

// TestProbeCache asks a real registry (with basic auth) whether a cache
// image exists: absent, present once pushed, unknown without credentials
// (the pull then decides), and absent at once when nothing listens.
func TestProbeCache(t *testing.T) {
	needPodman(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{Auth: true})
	ns, wl := "default", randomName("bt-probe")
	b, _ := testBuilder(t, Config{InsecureRegistries: []string{reg.Host, "127.0.0.1:1"}, AuthFile: reg.AuthFile}, ns, wl)
	anon, _ := testBuilder(t, Config{InsecureRegistries: []string{reg.Host}}, ns, wl)
	ref := reg.Host + "/cache/" + wl + ":0123456789ab"
	ctx := context.Background()
	if got, why := b.probeCache(ctx, ref); got != probeMissing {
		t.Fatalf("probe before the push = %v (%s), want missing", got, why)
	}
	podmanOutput(t, storeArgs(), "push", "--tls-verify=false", "--authfile", reg.AuthFile, baseImage, "docker://"+ref)
	if got, why := b.probeCache(ctx, ref); got != probePresent {
		t.Errorf("probe after the push = %v (%s), want present", got, why)
	}
	if got, _ := anon.probeCache(ctx, ref); got != probeUnknown {
		t.Errorf("probe without credentials = %v, want unknown (the registry wants them)", got)
	}
	start := time.Now()
	if got, why := b.probeCache(ctx, "127.0.0.1:1/cache/x:0123456789ab"); got != probeMissing || !strings.Contains(why, "unreachable") {
		t.Errorf("probe of an unreachable registry = %v (%s), want missing", got, why)
	}
	t.Logf("probing an unreachable registry took %s", time.Since(start))
}

// TestReleaseStartsWhatFollows: the cache push waits until the caller
// releases the build (its container started), not racing that start.
func TestReleaseStartsWhatFollows(t *testing.T) {
	needPodman(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bt-release")
	b, _ := testBuilder(t, Config{InsecureRegistries: []string{reg.Host}, Hold: time.Hour}, ns, wl)
	req := Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit,
		Spec: quadlet.BuildSpec{Cache: &quadlet.BuildCache{RegistryPath: reg.Host + "/cache/" + wl}}}
	if _, err := b.Build(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	ref := reg.Host + "/cache/" + wl + ":" + commit[:12]
	if got, _ := b.probeCache(context.Background(), ref); got != probeMissing {
		t.Fatalf("the cache push ran before the build was released (probe %v)", got)
	}
	b.Release(ns, wl, commit)
	b.settle()
	if got, why := b.probeCache(context.Background(), ref); got != probePresent {
		t.Fatalf("after the release: probe %v (%s), want the image pushed", got, why)
	}
}
