package resources_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// TestWriteWorkloadStatusGuards: a status is written only over the meta and
// status versions its writer derived it from, so it never outlives its
// workload and never replaces a newer derivation; the apply itself writes no
// status.
func TestWriteWorkloadStatusGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, resources.StatusKey("default", "web")); err == nil {
		t.Fatal("apply wrote a status: the status loop is its only writer")
	}
	meta, err := st.Get(ctx, resources.MetaKey("default", "web"))
	if err != nil {
		t.Fatal(err)
	}
	ready := api.WorkloadStatus{Phase: api.PhaseReady, Desired: 1, Ready: 1}
	tests := []struct {
		name             string
		metaVer, statVer int64
		want             bool
	}{
		{"meta moved on", meta.Version - 1, 0, false},
		{"first status", meta.Version, 0, true},
		{"status moved on", meta.Version, 0, false},
	}
	for _, tc := range tests {
		ok, _, err := r.WriteWorkloadStatus(ctx, "default", "web", ready, tc.metaVer, tc.statVer)
		if err != nil || ok != tc.want {
			t.Fatalf("%s: wrote %v (%v), want %v", tc.name, ok, err, tc.want)
		}
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	stKV, _ := st.Get(ctx, resources.StatusKey("default", "web"))
	var sv int64
	if stKV != nil {
		sv = stKV.Version
	}
	if ok, _, err := r.WriteWorkloadStatus(ctx, "default", "web", ready, meta.Version, sv); err != nil || ok {
		t.Fatalf("status of a deleted workload: wrote %v (%v)", ok, err)
	}
}

func TestAppSourcesAndBuildRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	a := api.AppSource{Namespace: "default", Workload: "web", Repository: "https://x/app.git", Ref: "branch main", Commit: "abc"}
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
