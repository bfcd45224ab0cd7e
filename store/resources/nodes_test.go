package resources_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

func TestUpdateAndDeleteNode(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	joined := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reg := api.NodeRegistration{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "a"}, JoinedAt: joined}
	if err := r.RegisterJoiningNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	got, err := r.UpdateNodeRegistration(ctx, "n1", func(reg *api.NodeRegistration) error {
		reg.Unschedulable = true
		reg.Taints = append(reg.Taints, api.Taint{Key: "gpu", Value: "yes", Effect: api.TaintNoSchedule})
		reg.Labels["disk"] = "ssd"
		return nil
	})
	if err != nil || !got.Unschedulable || len(got.Taints) != 1 {
		t.Fatalf("update: %+v, %v", got, err)
	}

	// Rejoining (a restart) keeps what the operator set; the node's own
	// labels win.
	again := api.NodeRegistration{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "b"}, JoinedAt: joined.Add(time.Hour)}
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
	if _, err := r.UpdateNodeRegistration(ctx, "n1", func(reg *api.NodeRegistration) error {
		reg.Unschedulable = false
		return refuse
	}); !errors.Is(err, refuse) {
		t.Fatalf("change error: %v", err)
	}
	if stored, _ := r.GetNodeRegistration(ctx, "n1"); !stored.Unschedulable {
		t.Fatal("a refused change was written")
	}
	if _, err := r.UpdateNodeRegistration(ctx, "nope", func(*api.NodeRegistration) error { return nil }); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}

	if _, err := r.WriteAssignments(ctx, []api.Assignment{{Node: "n1", InstanceID: "web-1", Namespace: "default", Workload: "web"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: 1}); err != nil {
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

// cordonBetween is the real store, except that the first read of a node's
// registration is followed at once by the operator's cordon of it: what a
// read-then-put registration would overwrite.
type cordonBetween struct {
	store.StateStore
	key  string
	once sync.Once
}

func (s *cordonBetween) Get(ctx context.Context, key string) (*store.KV, error) {
	kv, err := s.StateStore.Get(ctx, key)
	if key == s.key {
		s.once.Do(func() {
			var reg api.NodeRegistration
			if err := json.Unmarshal(kv.Value, &reg); err != nil {
				panic(err)
			}
			reg.Unschedulable = true
			b, _ := json.Marshal(reg)
			if err := s.Put(ctx, key, b); err != nil {
				panic(err)
			}
		})
	}
	return kv, err
}

// TestRegisterSelfKeepsAConcurrentCordon: a leader that registers itself
// again keeps the operator's fields, a cordon made between its read and its
// write included; a new registration is written as it is.
func TestRegisterSelfKeepsAConcurrentCordon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, st := newRepo(t)
	joined := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := resources.New(&cordonBetween{StateStore: st, key: resources.NodeRegistrationKey("n1")})
	first := api.NodeRegistration{Name: "n1", UID: "u1", Labels: map[string]string{"zone": "a"}, JoinedAt: joined, EtcdMember: true}
	if err := resources.New(st).RegisterSelf(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got, err := resources.New(st).GetNodeRegistration(ctx, "n1"); err != nil || got.Unschedulable || !got.JoinedAt.Equal(joined) {
		t.Fatalf("new registration: %+v, %v", got, err)
	}
	again := first
	again.JoinedAt, again.Labels = joined.Add(time.Hour), map[string]string{"zone": "b"}
	if err := r.RegisterSelf(ctx, again); err != nil {
		t.Fatal(err)
	}
	got, err := r.GetNodeRegistration(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Unschedulable || !got.JoinedAt.Equal(joined) || got.Labels["zone"] != "b" {
		t.Fatalf("after registering again with a cordon in between: %+v, want cordoned, joined %v, zone b", got, joined)
	}
}
