package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestStatusSaysDetached: katcall status against a detached node's plane
// says so, from which cluster and since when, the last failed rejoin and
// the failed starts of the plane;
// against a cluster that is no detached node it prints no such line.
func TestStatusSaysDetached(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	if code, out, errOut := c.katcall("status"); code != 0 || strings.Contains(out, "Detached") {
		t.Fatalf("status of a cluster: exit %d, %q %q", code, out, errOut)
	}
	d := api.Detached{Node: "n1", Since: time.Now().Add(-3 * time.Minute), ParentCluster: "home", ParentClusterUID: "u-home",
		LastRejoinAttempt: time.Now().Add(-time.Minute), RejoinError: "hand back: connection refused",
		StartFailures: 2, LastStartError: "listen for the API on port 9115: address already in use"}
	if err := c.repo.SetDetached(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := c.katcall("status")
	if code != 0 || !strings.Contains(out, "Detached:   node n1, detached from cluster home (u-home) since 3m") ||
		!strings.Contains(out, "Rejoin:     last tried 1m") || !strings.Contains(out, "connection refused") ||
		!strings.Contains(out, "Plane:      started after 2 failed attempts; the last: listen for the API on port 9115") {
		t.Fatalf("status of a detached node: exit %d\n%s%s", code, out, errOut)
	}
}

// TestGetWorkloadsShowsPinnedNode: katcall get workloads shows, in its
// NODE column, the node a workload applied to a detached node is pinned
// to, and "-" for one that is not pinned.
func TestGetWorkloadsShowsPinnedNode(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	if _, err := c.repo.EnsureNamespace(ctx, "default", nil); err != nil {
		t.Fatal(err)
	}
	apply := func(name string) {
		t.Helper()
		dir := t.TempDir()
		kat := strings.Replace(strings.Replace(rolloutWorkload, "%d", "1", 1), "name: roll", "name: "+name, 1)
		if err := os.WriteFile(filepath.Join(dir, "workload.kat"), []byte(kat), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := c.katcall("apply", "-f", dir); code != 0 {
			t.Fatalf("apply %s: exit %d\n%s%s", name, code, out, errOut)
		}
	}
	apply("loose")
	if err := c.repo.SetDetached(ctx, api.Detached{Node: "laptop", Since: time.Now(), ParentCluster: "home", ParentClusterUID: "u-home"}); err != nil {
		t.Fatal(err)
	}
	apply("local")
	code, out, errOut := c.katcall("get", "workloads", "-n", "default")
	if code != 0 {
		t.Fatalf("get workloads: exit %d\n%s%s", code, out, errOut)
	}
	node := map[string]string{}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	head := strings.Fields(lines[0])
	col := slices.Index(head, "NODE")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); col >= 0 && len(f) == len(head) {
			node[f[1]] = f[col]
		}
	}
	if node["local"] != "laptop" || node["loose"] != "-" {
		t.Fatalf("get workloads: NODE column %v, want local on laptop and loose on none:\n%s", node, out)
	}
}
