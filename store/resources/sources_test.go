package resources_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func TestSourceRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	spec := api.SourceSpec{Name: "config", URL: "file:///srv/config.git", Branch: "main", Path: ".", IntervalSeconds: 30}
	if created, err := r.CreateSourceSpec(ctx, spec); err != nil || !created {
		t.Fatalf("CreateSourceSpec = %v, %v", created, err)
	}
	spec2 := spec
	spec2.Branch = "other"
	if created, err := r.CreateSourceSpec(ctx, spec2); err != nil || created {
		t.Fatalf("second CreateSourceSpec = %v, %v; want false: an existing source is kept", created, err)
	}
	if created, err := r.PutSourceSpec(ctx, spec2); err != nil || created {
		t.Fatalf("PutSourceSpec = %v, %v", created, err)
	}
	st := api.SourceStatus{AppliedCommit: "abc", PathErrors: []api.PathError{{Path: "apps/web", Error: "bad"}}}
	if err := r.PutSourceStatus(ctx, "config", st); err != nil {
		t.Fatal(err)
	}
	got, err := r.GetSource(ctx, "config")
	if err != nil || got.Spec.Branch != "other" || got.Status.AppliedCommit != "abc" || len(got.Status.PathErrors) != 1 {
		t.Fatalf("GetSource = %+v, %v", got, err)
	}
	// A status without a spec (a leftover) is not listed.
	if err := r.PutSourceStatus(ctx, "ghost", st); err != nil {
		t.Fatal(err)
	}
	list, err := r.ListSources(ctx)
	if err != nil || len(list) != 1 || list[0].Spec.Name != "config" {
		t.Fatalf("ListSources = %+v, %v", list, err)
	}
	if err := r.DeleteSource(ctx, "config"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetSource(ctx, "config"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("GetSource after delete = %v, want ErrNotFound", err)
	}
	if err := r.DeleteSource(ctx, "config"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("second DeleteSource = %v, want ErrNotFound", err)
	}
}

func TestEventsAreCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	for i := range resources.DefaultEventKeep + 5 {
		if err := r.AppendEvent(ctx, api.Event{Object: "source/config", Reason: "Applied", Message: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := r.ListEvents(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != resources.DefaultEventKeep || evs[0].Message != "5" || evs[len(evs)-1].Message != fmt.Sprint(resources.DefaultEventKeep+4) {
		t.Fatalf("kept %d events from %q to %q; want the newest %d", len(evs), evs[0].Message, evs[len(evs)-1].Message, resources.DefaultEventKeep)
	}
	last, err := r.ListEvents(ctx, 3)
	if err != nil || len(last) != 3 || last[2].Message != fmt.Sprint(resources.DefaultEventKeep+4) {
		t.Fatalf("ListEvents(3) = %+v, %v", last, err)
	}
}

// TestAppendEventsBatches: AppendEvents writes more events than one
// transaction holds, in order; given more than the list keeps, the list
// holds the newest by time, whatever their order in the call, and the
// trim of more keys than one transaction holds works.
func TestAppendEventsBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	batch := func(from, n int) []api.Event {
		evs := make([]api.Event, n)
		for i := range n {
			evs[i] = api.Event{Time: base.Add(time.Duration(from+i) * time.Second), Object: "workload/ns/w", Reason: "RolloutSucceeded", Message: fmt.Sprint(from + i)}
		}
		return evs
	}
	if err := r.AppendEvents(ctx, batch(0, 250)); err != nil {
		t.Fatal(err)
	}
	evs, err := r.ListEvents(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 250 || evs[0].Message != "0" || evs[249].Message != "249" {
		t.Fatalf("after 250: %d events from %q to %q", len(evs), evs[0].Message, evs[len(evs)-1].Message)
	}
	// 700 more, newest first: 450 of the old ones and 250 of these go.
	more := batch(250, 700)
	slices.Reverse(more)
	if err := r.AppendEvents(ctx, more); err != nil {
		t.Fatal(err)
	}
	if evs, err = r.ListEvents(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if len(evs) != resources.DefaultEventKeep || evs[0].Message != fmt.Sprint(950-resources.DefaultEventKeep) || evs[len(evs)-1].Message != "949" {
		t.Fatalf("kept %d events from %q to %q; want the newest %d, %d to 949", len(evs), evs[0].Message, evs[len(evs)-1].Message,
			resources.DefaultEventKeep, 950-resources.DefaultEventKeep)
	}
	for i := 1; i < len(evs); i++ {
		if !evs[i-1].Time.Before(evs[i].Time) {
			t.Fatalf("events %d and %d out of order: %v, %v", i-1, i, evs[i-1].Time, evs[i].Time)
		}
	}
	if err := r.AppendEvents(ctx, nil); err != nil {
		t.Fatalf("AppendEvents(nil) = %v", err)
	}
	// 100 events of 20 KiB: 2 MiB, more than etcd takes in one request,
	// so the batches are bounded by bytes too.
	big := batch(950, 100)
	for i := range big {
		big[i].Message = strings.Repeat("x", 20<<10)
	}
	if err := r.AppendEvents(ctx, big); err != nil {
		t.Fatalf("100 events of 20 KiB: %v", err)
	}
	if last, err := r.ListEvents(ctx, 1); err != nil || len(last) != 1 || !last[0].Time.Equal(big[99].Time) {
		t.Fatalf("after the large events: %+v, %v", last, err)
	}
}

func TestSuspendResumeAndGitPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, _ := newRepo(t)
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "api", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SetSuspended(ctx, "default", "api", true); !errors.Is(err, resources.ErrConflict) {
		t.Fatalf("suspend of an API workload = %v, want ErrConflict", err)
	}
	git := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "web"}
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1), Owner: git}); err != nil {
		t.Fatal(err)
	}
	if m, err := r.SetSuspended(ctx, "default", "web", true); err != nil || !m.Suspended {
		t.Fatalf("suspend = %+v, %v", m, err)
	}
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 2), Owner: git}); !errors.Is(err, resources.ErrSuspended) {
		t.Fatalf("git write while suspended = %v, want ErrSuspended", err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web", Owner: git}); !errors.Is(err, resources.ErrSuspended) {
		t.Fatalf("git prune while suspended = %v, want ErrSuspended", err)
	}
	if m, err := r.SetSuspended(ctx, "default", "web", false); err != nil || m.Suspended {
		t.Fatalf("resume = %+v, %v", m, err)
	}
	other := api.Owner{Kind: api.OwnerGit, Source: "other"}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web", Owner: other}); !errors.Is(err, resources.ErrConflict) {
		t.Fatalf("prune by another source = %v, want ErrConflict", err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "api", Owner: git}); !errors.Is(err, resources.ErrConflict) {
		t.Fatalf("git prune of an API workload = %v, want ErrConflict", err)
	}
	if _, err := r.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "default", Name: "web", Owner: git}); err != nil {
		t.Fatalf("git prune = %v", err)
	}
}
