package resources_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/store/resources"
)

// TestUpdateWorkloadStatusKeepsConcurrentCondition: a condition another
// writer sets between the read and the write is seen by fn on its retry, not
// lost.
func TestUpdateWorkloadStatusKeepsConcurrentCondition(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1)}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	err := r.UpdateWorkloadStatus(ctx, "default", "web", func(prev resources.WorkloadStatus) (resources.WorkloadStatus, bool) {
		calls++
		if calls == 1 {
			if err := r.SetWorkloadCondition(ctx, "default", "web", resources.Condition{
				Type: "Stalled", Status: resources.ConditionTrue, Reason: "InvalidQuadlet", Message: "bad"}); err != nil {
				t.Fatal(err)
			}
		}
		prev.Phase = resources.PhaseReady
		return prev, true
	})
	if err != nil || calls != 2 {
		t.Fatalf("UpdateWorkloadStatus: %v after %d calls; want a retry", err, calls)
	}
	w, err := r.GetWorkload(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range w.Status.Conditions {
		found = found || c.Reason == "InvalidQuadlet"
	}
	if w.Status.Phase != resources.PhaseReady || !found {
		t.Fatalf("status %+v: want phase Ready and the other writer's condition", w.Status)
	}
	if err := r.UpdateWorkloadStatus(ctx, "default", "gone", func(p resources.WorkloadStatus) (resources.WorkloadStatus, bool) {
		t.Fatal("fn called for a missing workload")
		return p, false
	}); err != nil {
		t.Fatalf("missing workload: %v", err)
	}
}

func TestAppSourcesAndBuildRecords(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	a := resources.AppSource{Namespace: "default", Workload: "web", Repository: "https://x/app.git", Ref: "branch main", Commit: "abc"}
	if err := r.PutAppSource(ctx, a); err != nil {
		t.Fatal(err)
	}
	got, err := r.ListAppSources(ctx)
	if err != nil || got["default/web"].Commit != "abc" {
		t.Fatalf("ListAppSources = %+v, %v", got, err)
	}
	if err := r.DeleteAppSource(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteAppSource(ctx, "default", "web"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	commit := "0123456789abcdef0123456789abcdef01234567"
	if k := resources.BuildRecordKey("default", "web", commit, "n1"); k != "/kat/builds/default/web/0123456789ab/n1" {
		t.Fatalf("BuildRecordKey = %s", k)
	}
	for _, n := range []string{"n1", "n2"} {
		if err := r.PutBuildRecordJSON(ctx, "default", "web", commit, n, []byte(`{"node":"`+n+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	kvs, err := r.ListBuildRecordsJSON(ctx, "default", "web", commit)
	if err != nil || len(kvs) != 2 {
		t.Fatalf("ListBuildRecordsJSON = %d, %v", len(kvs), err)
	}

	// Three more commits, newer: keeping 2 drops the two oldest commits
	// (each with every node's record).
	for i, c := range []string{"1", "2", "3"} {
		full := strings.Repeat(c, 40)
		rec := fmt.Sprintf(`{"startedAt":%q}`, time.Unix(int64(100+i), 0).UTC().Format(time.RFC3339))
		if err := r.PutBuildRecordJSON(ctx, "default", "web", full, "n1", []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.PruneBuildRecords(ctx, "default", "web", 2)
	if err != nil || n != 2 {
		t.Fatalf("PruneBuildRecords = %d, %v; want 2", n, err)
	}
	kvs, _ = r.ListBuildRecordsJSON(ctx, "default", "web", "")
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, kv.Key)
	}
	want := []string{"/kat/builds/default/web/222222222222/n1", "/kat/builds/default/web/333333333333/n1"}
	if !slices.Equal(keys, want) {
		t.Fatalf("left %v, want %v", keys, want)
	}
	if n, err := r.PruneBuildRecords(ctx, "default", "web", 0); err != nil || n != 2 {
		t.Fatalf("PruneBuildRecords(0) = %d, %v", n, err)
	}
}
