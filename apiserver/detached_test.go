package apiserver_test

import (
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// TestDetachedPinsAppliedWorkloads: on a detached node's API a workload
// applied gets the nodeSelector kat.dws.rip/nodeName: NODE in its
// workload.kat (shown by get), status says detached, since when and from
// which cluster, and a workload selecting another node is refused (422)
// writing nothing. Before the record exists nothing is pinned.
func TestDetachedPinsAppliedWorkloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := t.Context()
	if _, err := f.client.ApplyWorkload(ctx, "default", "before", archiveOf(t, map[string]string{"workload.kat": workloadKat("before", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := f.client.GetWorkloadFile(ctx, "default", "before", quadlet.WorkloadFile); err != nil || strings.Contains(string(b), resources.NodeNameLabel) {
		t.Fatalf("a cluster that is no detached node pinned a workload: %s %v", b, err)
	}
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if err := f.repo.SetDetached(ctx, api.Detached{Node: "laptop", Since: since, ParentCluster: "home", ParentClusterUID: "u1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "web", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	wl, err := f.client.GetWorkload(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.client.GetWorkloadFile(ctx, "default", "web", quadlet.WorkloadFile)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: b}, quadlet.ParseOptions{})
	if err != nil || q.Workload.Spec.NodeSelector[resources.NodeNameLabel] != "laptop" {
		t.Fatalf("workload.kat of an apply to the detached node (generation %d): %v\n%s", wl.Generation, err, b)
	}
	st, err := f.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Detached; d == nil || d.Node != "laptop" || !d.Since.Equal(since) || d.ParentCluster != "home" {
		t.Fatalf("status of a detached node: %+v", st.Detached)
	}

	before := f.snapshot(t)
	other := strings.Replace(workloadKat("elsewhere", "", 1), "  replicas: 1\n", "  replicas: 1\n  nodeSelector: {kat.dws.rip/nodeName: desk}\n", 1)
	code, e := f.raw(t, "PUT", "/v1alpha1/n/default/workloads/elsewhere", token, archiveOf(t, map[string]string{"workload.kat": other}))
	if code != 422 || !strings.Contains(e.Message, "detached") {
		t.Fatalf("a workload selecting another node: %d %+v, want 422 saying why", code, e)
	}
	if f.snapshot(t) != before {
		t.Fatal("a refused apply changed the state")
	}
}
