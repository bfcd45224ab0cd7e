package resources_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// TestNodeFactsHeartbeat: the first report writes the status; reports that
// change nothing but the time move only the heartbeat; a changed report,
// or the first after the registration changed, writes the status again; a
// node whose registration went is refused with ErrNotFound.
func TestNodeFactsHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	facts := resources.NewNodeFacts(r, nil)
	reg := api.NodeRegistration{Name: "n1", JoinedAt: time.Now()}
	if err := r.PutNodeRegistration(ctx, reg); err != nil {
		t.Fatal(err)
	}
	version := func(key string) int64 {
		t.Helper()
		kv, err := st.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return kv.Version
	}
	// Each report is new, as the heartbeat makes it: the recorder keeps
	// the last one it wrote.
	phase := api.InstanceRunning
	report := func(ts int64) api.NodeStatus {
		// The usage differs in every report, as sampled usage does.
		return api.NodeStatus{NodeName: "n1", Timestamp: ts, WorkloadInstances: []api.InstanceStatus{{InstanceID: "i1", Phase: phase}},
			Usage: &api.NodeUsage{SampledAt: ts, ResourceUsage: api.ResourceUsage{CPUMillis: ts}}}
	}
	beat := func(ts int64) {
		t.Helper()
		if err := facts.RecordStatus(ctx, report(ts)); err != nil {
			t.Fatal(err)
		}
	}
	beat(100)
	statusVer, beatVer := version(resources.NodeStatusKey("n1")), version(resources.NodeHeartbeatKey("n1"))
	beat(101)
	beat(102)
	if v := version(resources.NodeStatusKey("n1")); v != statusVer {
		t.Errorf("unchanged reports rewrote the status (version %d, was %d)", v, statusVer)
	}
	if v := version(resources.NodeHeartbeatKey("n1")); v <= beatVer {
		t.Errorf("reports did not move the heartbeat (version %d, was %d)", v, beatVer)
	}
	if got, err := r.GetNodeStatus(ctx, "n1"); err != nil || got.Usage != nil {
		t.Errorf("status %+v, %v: want it without the usage, which lives beside the heartbeat", got, err)
	}
	if nodes, err := r.ListNodes(ctx); err != nil || len(nodes) != 1 || nodes[0].Status.Usage == nil || nodes[0].Status.Usage.CPUMillis != 102 {
		t.Errorf("ListNodes = %+v, %v: want n1 with the last usage (CPU 102m)", nodes, err)
	}

	phase = api.InstanceFailed
	beat(103)
	changedVer := version(resources.NodeStatusKey("n1"))
	if changedVer == statusVer {
		t.Error("a changed report was not written")
	}
	// After the registration changed (a node joining again, a new
	// leader's registerSelf, which rewrites the status too), the first
	// report is written whole: the recorder read the registration anew and
	// forgot what it wrote.
	if err := r.PutNodeRegistration(ctx, reg); err != nil {
		t.Fatal(err)
	}
	beat(104)
	if v := version(resources.NodeStatusKey("n1")); v == changedVer {
		t.Error("the first report after the registration changed was not written")
	}
	got, err := r.GetNodeStatus(ctx, "n1")
	if err != nil || got.Timestamp != 104 || got.WorkloadInstances[0].Phase != api.InstanceFailed {
		t.Fatalf("status %+v, %v; want the last report", got, err)
	}

	if err := r.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, resources.NodeUsageKey("n1")); err == nil {
		t.Error("DeleteNode left the node's usage")
	}
	if err := facts.RecordStatus(ctx, report(105)); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("the report of a node whose registration went: %v, want ErrNotFound", err)
	}
}

// TestNodeFactsBuildRecordsAndEvents: a build record goes under its
// workload, commit and node; an event gets the recorder's time, not the
// node's.
func TestNodeFactsBuildRecordsAndEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	r, _ := newRepo(t, resources.WithClock(func() time.Time { return now }))
	facts := resources.NewNodeFacts(r, nil)
	commit := "0123456789abcdef0123456789abcdef01234567"
	rec := api.Build{Namespace: "default", Workload: "web", Commit: commit, Node: "n1", State: api.BuildSucceeded}
	if err := facts.PutBuildRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	kvs, err := r.ListBuildRecordsJSON(ctx, "default", "web", commit)
	if err != nil || len(kvs) != 1 || kvs[0].Key != resources.BuildRecordKey("default", "web", commit, "n1") {
		t.Fatalf("build records %+v, %v; want n1's", kvs, err)
	}
	var got api.Build
	if err := json.Unmarshal(kvs[0].Value, &got); err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("stored %+v, %v; want %+v", got, err, rec)
	}

	ev := api.Event{Type: api.EventWarning, Object: "workload/default/web", Reason: "BuildFailed", Time: now.Add(-time.Hour)}
	if err := facts.AppendEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	evs, err := r.ListEvents(ctx, 0)
	if err != nil || len(evs) != 1 || !evs[0].Time.Equal(now) || evs[0].Reason != "BuildFailed" {
		t.Fatalf("events %+v, %v; want the event at the recorder's time %v", evs, err, now)
	}
}
