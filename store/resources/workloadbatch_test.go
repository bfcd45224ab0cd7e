package resources_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// countingStore counts the transactions that write, and runs beforeWrite
// (once) before the first of them: a concurrent writer between a batch's
// read and its write.
type countingStore struct {
	store.StateStore
	mu          sync.Mutex
	writes      int
	beforeWrite func()
}

func (s *countingStore) Txn(ctx context.Context, checks []store.Compare, then, els []store.Op) (*store.TxnResult, error) {
	writes := slices.ContainsFunc(then, func(op store.Op) bool { return op.Type != store.OpGet })
	s.mu.Lock()
	var before func()
	if writes {
		s.writes++
		before, s.beforeWrite = s.beforeWrite, nil
	}
	s.mu.Unlock()
	if before != nil {
		before()
	}
	return s.StateStore.Txn(ctx, checks, then, els)
}

func (s *countingStore) writeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

func newCountingRepo(t *testing.T) (*resources.Repo, *countingStore) {
	t.Helper()
	cs := &countingStore{StateStore: storetest.New(t)}
	r := resources.New(cs)
	if _, err := r.EnsureNamespace(context.Background(), "default", nil); err != nil {
		t.Fatal(err)
	}
	return r, cs
}

// applyNew applies n new Git-owned workloads w000... in one ApplyWorkloads.
func applyNew(t *testing.T, r *resources.Repo, n int) ([]resources.ApplyRequest, []resources.ApplyOutcome) {
	t.Helper()
	var reqs []resources.ApplyRequest
	for i := range n {
		reqs = append(reqs, gitRequest(service(t, "default", fmt.Sprintf("w%03d", i), 1), "c1"))
	}
	outs, err := r.ApplyWorkloads(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return reqs, outs
}

func gitRequest(q *quadlet.Quadlet, commit string) resources.ApplyRequest {
	return resources.ApplyRequest{Quadlet: q, Owner: api.Owner{
		Kind: api.OwnerGit, Source: "config", Path: "apps/" + q.Name(), Commit: commit}}
}

// TestApplyWorkloadsBatches: 260 new workloads are written in far fewer
// transactions than workloads, each exactly once (generation 1, one archived
// generation, the meta written at the revision its result names); the same
// requests again write nothing; a later batch moves only the generations of
// the workloads whose spec changed, and a request refused on its own (a
// missing namespace, another owner) fails alone.
func TestApplyWorkloadsBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, cs := newCountingRepo(t)
	const n = 260
	reqs, outs := applyNew(t, r, n)
	if w := cs.writeCount(); w > n/10 {
		t.Errorf("%d write transactions for %d workloads, want batches", w, n)
	}
	for i, o := range outs {
		name := fmt.Sprintf("w%03d", i)
		if o.Err != nil || !o.Result.Created || o.Result.Meta.Generation != 1 || o.Result.Meta.Name != name || o.Result.Revision == 0 {
			t.Fatalf("%s: %+v, %v", name, o.Result, o.Err)
		}
		kv, err := cs.Get(ctx, resources.MetaKey("default", name))
		if err != nil || kv.Version != o.Result.Revision {
			t.Fatalf("%s: meta at revision %v (%v), want the batch's %d", name, kv, err, o.Result.Revision)
		}
		if gens, err := r.ArchivedGenerations(ctx, "default", name); err != nil || !slices.Equal(gens, []int64{1}) {
			t.Fatalf("%s: archive %v, %v; want [1]", name, gens, err)
		}
	}

	before := cs.writeCount()
	outs, err := r.ApplyWorkloads(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil || o.Result.Changed || o.Result.Revision != 0 {
			t.Fatalf("w%03d applied again: %+v, %v; want unchanged", i, o.Result, o.Err)
		}
	}
	if w := cs.writeCount(); w != before {
		t.Errorf("%d write transactions for unchanged workloads", w-before)
	}

	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "api-owned", 1)}); err != nil {
		t.Fatal(err)
	}
	mixed := []resources.ApplyRequest{
		gitRequest(service(t, "default", "w000", 2), "c2"),
		gitRequest(service(t, "missing", "lost", 1), "c2"),
		gitRequest(service(t, "default", "w001", 1), "c2"),
		{Quadlet: service(t, "default", "w002", 3)}, // the API on a Git-owned workload
		gitRequest(service(t, "default", "w003", 4), "c2"),
	}
	outs, err = r.ApplyWorkloads(ctx, mixed)
	if err != nil {
		t.Fatal(err)
	}
	var conflict *resources.OwnershipError
	for i, check := range []func(resources.ApplyOutcome) bool{
		func(o resources.ApplyOutcome) bool { return o.Err == nil && o.Result.Meta.Generation == 2 },
		func(o resources.ApplyOutcome) bool { return errors.Is(o.Err, resources.ErrNotFound) },
		func(o resources.ApplyOutcome) bool { // the same spec: only the owner's commit moves
			return o.Err == nil && o.Result.Meta.Generation == 1 && o.Result.Meta.Owner.Commit == "c2"
		},
		func(o resources.ApplyOutcome) bool {
			return errors.As(o.Err, &conflict) && errors.Is(o.Err, resources.ErrConflict)
		},
		func(o resources.ApplyOutcome) bool { return o.Err == nil && o.Result.Meta.Generation == 2 },
	} {
		if !check(outs[i]) {
			t.Errorf("request %d (%s): %+v, %v", i, mixed[i].Quadlet.Name(), outs[i].Result, outs[i].Err)
		}
	}
	if w, err := r.GetWorkload(ctx, "default", "w002"); err != nil || w.Generation != 1 {
		t.Errorf("w002 after a refused write: %+v, %v", w, err)
	}
}

// TestApplyWorkloadsConcurrentWriter: a writer that changes a workload
// between a batch's read and its write makes the batch's checks fail; the
// batch is then written one workload at a time, so nothing is lost: the
// other writer's change and the batch's own are both applied, in order.
func TestApplyWorkloadsConcurrentWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, cs := newCountingRepo(t)
	var reqs []resources.ApplyRequest
	for i := range 10 {
		reqs = append(reqs, gitRequest(service(t, "default", fmt.Sprintf("w%d", i), 1), "c1"))
	}
	if _, err := r.ApplyWorkloads(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	cs.beforeWrite = func() {
		if _, err := r.ApplyWorkload(ctx, gitRequest(service(t, "default", "w3", 7), "other")); err != nil {
			t.Error(err)
		}
	}
	for i := range reqs {
		reqs[i] = gitRequest(service(t, "default", fmt.Sprintf("w%d", i), 2), "c2")
	}
	outs, err := r.ApplyWorkloads(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		want := int64(2)
		if i == 3 {
			want = 3 // the other writer's generation 2, then the batch's
		}
		if o.Err != nil || o.Result.Meta.Generation != want {
			t.Errorf("w%d: %+v, %v; want generation %d", i, o.Result, o.Err, want)
		}
	}
}

// TestWriteWorkloadStatusesBatches: statuses are written several to a
// transaction; one whose workload moved on (a stale meta version) is refused
// alone.
func TestWriteWorkloadStatusesBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, cs := newCountingRepo(t)
	const n = 120
	_, outs := applyNew(t, r, n)
	var ws []resources.StatusWrite
	for i, o := range outs {
		mv := o.Result.Revision
		if i == 77 {
			mv-- // a meta version that is no longer current
		}
		ws = append(ws, resources.StatusWrite{Namespace: "default", Name: o.Result.Meta.Name, MetaVersion: mv,
			Status: api.WorkloadStatus{ObservedGeneration: 1, Phase: api.PhasePending, Desired: i}})
	}
	before := cs.writeCount()
	written, rev, err := r.WriteWorkloadStatuses(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if rev == 0 {
		t.Error("no revision returned")
	}
	for i, ok := range written {
		w, err := r.GetWorkload(ctx, "default", ws[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i != 77) || (ok && w.Status.Desired != i) || (!ok && w.Status.Phase != "") {
			t.Errorf("%s: written %v, stored %+v", ws[i].Name, ok, w.Status)
		}
	}
	// Batches of 50, the one with the stale status again one by one.
	if w := cs.writeCount() - before; w > n/50+1+50 {
		t.Errorf("%d write transactions for %d statuses", w, n)
	}
}
