package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestStatusSaysDetached: katcall status against a detached node's plane
// says so, from which cluster and since when, and the last failed rejoin;
// against a cluster that is no detached node it prints no such line.
func TestStatusSaysDetached(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	if code, out, errOut := c.katcall("status"); code != 0 || strings.Contains(out, "Detached") {
		t.Fatalf("status of a cluster: exit %d, %q %q", code, out, errOut)
	}
	d := api.Detached{Node: "n1", Since: time.Now().Add(-3 * time.Minute), ParentCluster: "home", ParentClusterUID: "u-home",
		LastRejoinAttempt: time.Now().Add(-time.Minute), RejoinError: "hand back: connection refused"}
	if err := c.repo.SetDetached(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := c.katcall("status")
	if code != 0 || !strings.Contains(out, "Detached:   node n1, detached from cluster home (u-home) since 3m") ||
		!strings.Contains(out, "Rejoin:     last tried 1m") || !strings.Contains(out, "connection refused") {
		t.Fatalf("status of a detached node: exit %d\n%s%s", code, out, errOut)
	}
}
