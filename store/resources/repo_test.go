package resources_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

func newRepo(t *testing.T, opts ...resources.Option) (*resources.Repo, store.StateStore) {
	t.Helper()
	st := storetest.New(t)
	r := resources.New(st, opts...)
	if _, err := r.EnsureNamespace(context.Background(), "default", nil); err != nil {
		t.Fatal(err)
	}
	return r, st
}

func TestApplyGenerationsAndArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t, resources.WithArchiveKeep(3))
	res, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Meta.Generation != 1 {
		t.Fatalf("first apply: %+v", res)
	}
	res, err = r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1)})
	if err != nil || res.Changed || res.Meta.Generation != 1 {
		t.Fatalf("same spec: %+v %v; want unchanged generation 1", res, err)
	}
	for replicas := 2; replicas <= 5; replicas++ {
		q := service(t, "default", "web", replicas)
		if replicas == 3 {
			q = withLoadBalancer(t, q)
		}
		if res, err = r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
			t.Fatal(err)
		}
	}
	if res.Meta.Generation != 5 {
		t.Fatalf("generation = %d, want 5", res.Meta.Generation)
	}
	gens, err := r.ArchivedGenerations(ctx, "default", "web")
	if err != nil || !slices.Equal(gens, []int64{3, 4, 5}) {
		t.Fatalf("archive = %v, %v; want [3 4 5]", gens, err)
	}
	files, err := r.ArchivedFiles(ctx, "default", "web", 3)
	if err != nil || len(files) != 2 {
		t.Fatalf("generation 3 archived %d files, %v; want workload.kat and VirtualLoadBalancer.kat", len(files), err)
	}
	// Generation 4 dropped VirtualLoadBalancer.kat: the desired state must not keep it.
	if _, err := r.GetManifest(ctx, "default", "web", "VirtualLoadBalancer.kat"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("stale manifest still there: %v", err)
	}
	w, err := r.GetWorkload(ctx, "default", "web")
	if err != nil || w.Generation != 5 || len(w.Files) != 1 || w.Files[0] != "workload.kat" {
		t.Fatalf("workload %+v, %v; want generation 5 with workload.kat only", w, err)
	}
}

func TestApplyNeedsTheNamespace(t *testing.T) {
	t.Parallel()
	r, _ := newRepo(t)
	_, err := r.ApplyWorkload(context.Background(), resources.ApplyRequest{Quadlet: service(t, "missing", "web", 1)})
	if !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("err = %v, want not found", err)
	}
}

func TestConcurrentAppliesLoseNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	const writers = 8
	applyConcurrently(t, r, writers, func(i int) *quadlet.Quadlet { return service(t, "default", "web", i+1) })
	w, err := r.GetWorkload(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if w.Generation != writers {
		t.Fatalf("generation = %d after %d distinct specs; a write was lost", w.Generation, writers)
	}
	gens, _ := r.ArchivedGenerations(ctx, "default", "web")
	if len(gens) != writers {
		t.Fatalf("archive holds %v, want %d generations", gens, writers)
	}
}

// TestConcurrentCreatesDoNotConflict: creating different workloads in one
// namespace at once must not contend on anything shared.
func TestConcurrentCreatesDoNotConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	const writers = 32
	applyConcurrently(t, r, writers, func(i int) *quadlet.Quadlet { return service(t, "default", fmt.Sprintf("w-%d", i), 1) })
	ws, err := r.ListWorkloads(ctx, "default")
	if err != nil || len(ws) != writers {
		t.Fatalf("%d workloads, %v; want %d", len(ws), err, writers)
	}
}

// applyConcurrently applies n Quadlets at once and fails the test on any
// error.
func applyConcurrently(t *testing.T, r *resources.Repo, n int, quadletFor func(i int) *quadlet.Quadlet) {
	t.Helper()
	qs := make([]*quadlet.Quadlet, n)
	for i := range n {
		qs[i] = quadletFor(i) // here: a fixture may call t.Fatal, which goroutines must not
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.ApplyWorkload(context.Background(), resources.ApplyRequest{Quadlet: q})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeleteRemovesEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web-2", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{resources.DesiredPrefix("default", "web"), resources.ArchivePrefix("default", "web")} {
		kvs, err := st.List(ctx, prefix)
		if err != nil || len(kvs) != 0 {
			t.Errorf("%d keys under %s survived the delete (%v)", len(kvs), prefix, err)
		}
	}
	if _, err := st.Get(ctx, resources.StatusKey("default", "web")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("status survived the delete: %v", err)
	}
	ws, err := r.ListWorkloads(ctx, "")
	if err != nil || len(ws) != 1 || ws[0].Name != "web-2" {
		t.Fatalf("after delete: %+v, %v; want only web-2 (a name sharing the prefix)", ws, err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web"}); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("second delete: %v, want not found", err)
	}
}

func TestNamespaces(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	if _, err := r.CreateNamespace(ctx, "team-a", map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateNamespace(ctx, "team-a", nil); !errors.Is(err, resources.ErrAlreadyExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "team-a", "web", 1)}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteNamespace(ctx, "team-a"); !errors.Is(err, resources.ErrNamespaceNotEmpty) {
		t.Fatalf("delete non-empty: %v", err)
	}
	if err := r.DeleteNamespace(ctx, "default"); !errors.Is(err, resources.ErrProtected) {
		t.Fatalf("delete default: %v", err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "team-a", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteNamespace(ctx, "team-a"); err != nil {
		t.Fatalf("delete empty namespace: %v", err)
	}
	nss, err := r.ListNamespaces(ctx)
	if err != nil || len(nss) != 1 || nss[0].Name != "default" {
		t.Fatalf("namespaces = %+v, %v", nss, err)
	}
}

func TestOwnershipProtectsGitWorkloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	git := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "apps/web", Commit: "abc123"}
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1), Owner: git}); err != nil {
		t.Fatal(err)
	}
	_, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 2)})
	var oe *resources.OwnershipError
	if !errors.As(err, &oe) || oe.Owner.Path != "apps/web" {
		t.Fatalf("api write to git workload: %v, want an OwnershipError naming apps/web", err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web"}); !errors.As(err, &oe) {
		t.Fatalf("api delete of git workload: %v", err)
	}
	res, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 2), Force: true})
	if err != nil || !res.Meta.Suspended || res.Meta.Generation != 2 {
		t.Fatalf("forced apply: %+v, %v", res, err)
	}
}

func TestClusterInitIsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	cfg := quadlet.ClusterConfiguration{APIVersion: quadlet.APIVersion, Kind: quadlet.KindClusterConfiguration}
	cfg.Metadata.Name = "prod"
	first, created, err := r.InitCluster(ctx, resources.ClusterInit{UID: "uid-1", Config: cfg, AdminToken: "secret-1", JoinToken: "join-1"})
	if err != nil || !created || first.Name != "prod" {
		t.Fatalf("first init: %+v, %v created=%v; want the identity named prod", first, err, created)
	}
	if got, err := r.ClusterInfo(ctx); err != nil || got.ClusterIdentity != first.ClusterIdentity {
		t.Fatalf("ClusterInfo = %+v, %v; want the identity %+v", got, err, first.ClusterIdentity)
	}
	second, created, err := r.InitCluster(ctx, resources.ClusterInit{UID: "uid-2", AdminToken: "secret-2"})
	if err != nil || created || second.UID != first.UID {
		t.Fatalf("second init: %+v created=%v err=%v; want the first cluster kept", second, created, err)
	}
	hash, err := r.AdminTokenHash(ctx)
	if err != nil || !resources.TokenMatches(hash, "secret-1") || resources.TokenMatches(hash, "secret-2") {
		t.Fatalf("admin token hash %q, %v", hash, err)
	}
	if resources.TokenMatches("", "") {
		t.Fatal("an empty hash must match nothing")
	}
}

// TestClusterInfoBeforeTheIdentityHeldTheName: a record init wrote before
// the identity held the name (only cluster.kat's metadata.name had it)
// reads with the name.
func TestClusterInfoBeforeTheIdentityHeldTheName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	old := `{"uid":"uid-1","config":{"apiVersion":"kat.dws.rip/v1alpha1","kind":"ClusterConfiguration","metadata":{"name":"prod"},"spec":{}},"createdAt":"2024-01-02T03:04:05Z"}`
	if err := st.Put(ctx, "/kat/config/cluster", []byte(old)); err != nil {
		t.Fatal(err)
	}
	info, err := r.ClusterInfo(ctx)
	want := api.ClusterIdentity{UID: "uid-1", Name: "prod", CreatedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err != nil || info.ClusterIdentity != want {
		t.Fatalf("ClusterInfo = %+v, %v; want %+v", info, err, want)
	}
}

func BenchmarkApplyWorkload(b *testing.B) {
	ctx := context.Background()
	r := resources.New(storetest.New(b))
	if _, err := r.EnsureNamespace(ctx, "default", nil); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		q := service(b, "default", fmt.Sprintf("w-%d", i%64), i)
		if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestArchiveKeepsTheNewestTenByDefault: without WithArchiveKeep the archive
// holds the newest 10 generations, the number the README and
// docs/architecture.md state, not every generation ever applied.
func TestArchiveKeepsTheNewestTenByDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if resources.DefaultArchiveKeep != 10 {
		t.Fatalf("DefaultArchiveKeep = %d: the README and docs/architecture.md say 10, change them with it", resources.DefaultArchiveKeep)
	}
	r, _ := newRepo(t)
	for replicas := 1; replicas <= 12; replicas++ {
		if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", replicas)}); err != nil {
			t.Fatal(err)
		}
	}
	gens, err := r.ArchivedGenerations(ctx, "default", "web")
	if want := []int64{3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; err != nil || !slices.Equal(gens, want) {
		t.Fatalf("archive = %v, %v; want the newest ten generations %v", gens, err, want)
	}
	if _, err := r.ArchivedFiles(ctx, "default", "web", 2); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("generation 2's files: %v; want them deleted with the generation", err)
	}
}
