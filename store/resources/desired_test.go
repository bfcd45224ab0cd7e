package resources_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/store/resources"
)

// TestDesiredIndexFollowsTheDesiredState: the index holds every workload's
// meta and files and which Git source owns which directory, and stays
// correct across updates, moves, a change of owner and deletes; each change
// tells its subscribers which workload changed.
func TestDesiredIndexFollowsTheDesiredState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	apply := func(req resources.ApplyRequest) int64 {
		t.Helper()
		res, err := r.ApplyWorkload(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Revision
	}
	apply(gitRequest(service(t, "default", "a", 1), "c1"))
	apply(gitRequest(service(t, "default", "b", 1), "c1"))
	apply(resources.ApplyRequest{Quadlet: service(t, "default", "api", 1)})

	d := resources.NewDesiredIndex(st)
	var mu sync.Mutex
	var told []string
	d.Subscribe(func(k string) {
		mu.Lock()
		told = append(told, k)
		mu.Unlock()
	})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = d.Run(rctx) }()
	<-d.Synced()
	waitFor := func(rev int64) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		if err := d.WaitRevision(wctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	owned := func(path string) []string {
		var out []string
		for _, m := range d.OwnedAt("config", path) {
			out = append(out, m.Name)
		}
		return out
	}

	if keys := d.Keys(); !slices.Equal(keys, []string{"default/a", "default/api", "default/b"}) {
		t.Fatalf("keys %v", keys)
	}
	w, ok := d.Workload("default", "a")
	if !ok || w.Meta.Generation != 1 || string(w.Files["workload.kat"]) != string(service(t, "default", "a", 1).Files["workload.kat"]) {
		t.Fatalf("workload a: %+v, %v", w, ok)
	}
	if d.Owned("config") != 2 || !slices.Equal(owned("apps/a"), []string{"a"}) || len(d.OwnedAt("config", "apps/api")) != 0 {
		t.Fatalf("owned %d, at apps/a %v", d.Owned("config"), owned("apps/a"))
	}

	// A new generation of a, b moved to another directory, api deleted.
	waitFor(apply(gitRequest(service(t, "default", "a", 2), "c2")))
	moved := gitRequest(service(t, "default", "b", 1), "c2")
	moved.Owner.Path = "other/b"
	waitFor(apply(moved))
	if _, rev, err := r.DeleteWorkloadRevision(ctx, resources.DeleteRequest{Namespace: "default", Name: "api"}); err != nil {
		t.Fatal(err)
	} else {
		waitFor(rev)
	}
	if w, _ := d.Workload("default", "a"); w.Meta.Generation != 2 || string(w.Files["workload.kat"]) != string(service(t, "default", "a", 2).Files["workload.kat"]) {
		t.Errorf("a after its second generation: %+v", w)
	}
	if len(owned("apps/b")) != 0 || !slices.Equal(owned("other/b"), []string{"b"}) || d.Owned("config") != 2 {
		t.Errorf("after the move: apps/b %v, other/b %v, owned %d", owned("apps/b"), owned("other/b"), d.Owned("config"))
	}
	if _, ok := d.Workload("default", "api"); ok || slices.Contains(d.Keys(), "default/api") {
		t.Error("a deleted workload is still indexed")
	}

	// The API takes b over: the source no longer owns it.
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "b", Force: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(apply(resources.ApplyRequest{Quadlet: service(t, "default", "b", 5)}))
	if d.Owned("config") != 1 || len(owned("other/b")) != 0 || len(d.Metas()) != 2 {
		t.Errorf("after the API took b: owned %d, other/b %v, metas %d", d.Owned("config"), owned("other/b"), len(d.Metas()))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"default/a", "default/b", "default/api"} {
		if !slices.Contains(told, k) {
			t.Errorf("subscribers never told of %s: %v", k, told)
		}
	}
}
