package resources_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"kat.dws.rip/kat/store/resources"
)

func TestUpdateAndDeleteNode(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	joined := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reg := resources.NodeRegistration{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "a"}, JoinedAt: joined}
	if err := r.RegisterJoiningNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	got, err := r.UpdateNodeRegistration(ctx, "n1", func(reg *resources.NodeRegistration) error {
		reg.Unschedulable = true
		reg.Taints = append(reg.Taints, resources.Taint{Key: "gpu", Value: "yes", Effect: resources.TaintNoSchedule})
		reg.Labels["disk"] = "ssd"
		return nil
	})
	if err != nil || !got.Unschedulable || len(got.Taints) != 1 {
		t.Fatalf("update: %+v, %v", got, err)
	}

	// Rejoining (a restart) keeps what the operator set; the node's own
	// labels win.
	again := resources.NodeRegistration{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "b"}, JoinedAt: joined.Add(time.Hour)}
	if err := r.RegisterJoiningNode(ctx, again); err != nil {
		t.Fatal(err)
	}
	stored, err := r.GetNodeRegistration(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Unschedulable || len(stored.Taints) != 1 || !stored.JoinedAt.Equal(joined) ||
		!maps.Equal(stored.Labels, map[string]string{"zone": "b", "disk": "ssd"}) {
		t.Fatalf("after rejoin: %+v", stored)
	}

	refuse := errors.New("no")
	if _, err := r.UpdateNodeRegistration(ctx, "n1", func(reg *resources.NodeRegistration) error {
		reg.Unschedulable = false
		return refuse
	}); !errors.Is(err, refuse) {
		t.Fatalf("change error: %v", err)
	}
	if stored, _ := r.GetNodeRegistration(ctx, "n1"); !stored.Unschedulable {
		t.Fatal("a refused change was written")
	}
	if _, err := r.UpdateNodeRegistration(ctx, "nope", func(*resources.NodeRegistration) error { return nil }); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}

	if _, err := r.WriteAssignments(ctx, []resources.Assignment{{Node: "n1", InstanceID: "web-1", Namespace: "default", Workload: "web"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.PutNodeStatus(ctx, resources.NodeStatus{NodeName: "n1", Timestamp: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetNodeRegistration(ctx, "n1"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("registration after delete: %v", err)
	}
	if as, err := r.ListAssignments(ctx, "n1"); err != nil || len(as) != 0 {
		t.Fatalf("assignments after delete: %v, %v", as, err)
	}
	if ns, err := r.ListNodes(ctx); err != nil || len(ns) != 0 {
		t.Fatalf("nodes after delete: %v, %v", ns, err)
	}
	if err := r.DeleteNode(ctx, "n1"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}
