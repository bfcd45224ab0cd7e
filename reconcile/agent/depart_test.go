package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestDepart: a departing agent tells the leader, with its start time, and
// returns ErrDeparted once its Service and DaemonService instances are no
// longer assigned (a Job's may stay); when they do not leave in time it says
// so.
func TestDepart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo := resources.New(storetest.New(t))
	svc := api.Assignment{InstanceID: "web-1-a", Node: "n1", Namespace: "ns1", Workload: "web", Type: quadlet.TypeService}
	dmn := api.Assignment{InstanceID: "logs-1-a", Node: "n1", Namespace: "ns1", Workload: "logs", Type: quadlet.TypeDaemonService}
	job := api.Assignment{InstanceID: "backup-1-a", Node: "n1", Namespace: "ns1", Workload: "backup", Type: quadlet.TypeJob}
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{svc, dmn, job}, nil); err != nil {
		t.Fatal(err)
	}
	facts := &memoryFacts{}
	started := time.Unix(1_700_000_000, 0).UTC()
	var left atomic.Int32
	left.Store(1) // the Service instance's container, until the agent removed it
	cfg := DepartConfig{Node: "n1", Facts: facts, Repo: repo, StartedAt: started, Wait: time.Minute,
		Leftovers: func() int { return int(left.Load()) }}

	// Not moved in time: an error that still says the node departed.
	short := cfg
	short.Wait = 50 * time.Millisecond
	if err := Depart(ctx, short); !errors.Is(err, ErrDeparted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Depart with the Service instance still assigned = %v, want ErrDeparted and the deadline", err)
	}

	done := make(chan error, 1)
	go func() { done <- Depart(ctx, cfg) }()
	polltest.Until(t, 10*time.Second, "the departure recorded", func() bool {
		facts.mu.Lock()
		defer facts.mu.Unlock()
		return len(facts.events) == 2
	})
	select {
	case err := <-done:
		t.Fatalf("Depart returned %v while a Service instance is assigned", err)
	default:
	}
	if _, err := repo.WriteAssignments(ctx, nil, []api.Assignment{svc}); err != nil {
		t.Fatal(err)
	}
	// The assignment is gone, its container not yet: Depart waits on.
	polltest.Until(t, 10*time.Second, "Depart sees the assignment gone", func() bool {
		as, err := repo.ListAssignments(ctx, "n1")
		return err == nil && len(as) == 2
	})
	select {
	case err := <-done:
		t.Fatalf("Depart returned %v while a container is left to remove", err)
	default:
	}
	left.Store(0)
	// Only the DaemonService (and the Job) instance is left: not done.
	if err := Depart(ctx, short); !errors.Is(err, ErrDeparted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Depart with the DaemonService instance still assigned = %v, want ErrDeparted and the deadline", err)
	}
	if _, err := repo.WriteAssignments(ctx, nil, []api.Assignment{dmn}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrDeparted) || err != ErrDeparted { //nolint:errorlint // exactly the sentinel: no error on the way
			t.Errorf("Depart = %v, want ErrDeparted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Depart did not return within 10s of the Service instance's move")
	}
}
