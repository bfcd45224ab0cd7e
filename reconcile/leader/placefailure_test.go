package leader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// TestStepPlacementFailure: each failed pass counts one more attempt, the
// next try doubling from Base up to Cap; a pass that succeeds drops the
// record.
func TestStepPlacementFailure(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0).UTC()
	pol := ReplacePolicy{Base: 2 * time.Second, Cap: 5 * time.Second}
	boom := errors.New("boom")
	var rec *PlacementFailure
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second} {
		now := t0.Add(time.Duration(i) * time.Minute)
		rec = stepPlacementFailure(rec, boom, now, pol)
		if rec == nil || rec.Attempts != i+1 || !rec.LastAt.Equal(now) || !rec.NextAt.Equal(now.Add(want)) || rec.Reason != "boom" {
			t.Fatalf("after failure %d: %+v, want attempt %d, next try %s later", i+1, rec, i+1, want)
		}
	}
	if rec = stepPlacementFailure(rec, nil, t0, pol); rec != nil {
		t.Errorf("after a pass that succeeded: %+v, want no record", rec)
	}
}

// TestPlacementFailureInStatus: a workload whose placement passes fail
// shows the attempts, the last attempt, the next try and the error in its
// status (written by the status loop), with a PlacementFailed condition and
// event, and gets a pass at the next try; a pass that succeeds clears them.
func TestPlacementFailureInStatus(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	clk := &fakeClock{now: time.Unix(e.base, 0).UTC()}
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	pol := ReplacePolicy{Base: time.Minute, Cap: time.Hour}
	l, stop := e.run(Config{Now: clk.Now, NodeLossTimeout: time.Hour, Replace: pol})
	defer stop()
	polltest.Until(t, 10*time.Second, "the instance placed and the loops idle", func() bool {
		return len(e.assignments("web")) == 1 && l.idle()
	})
	keys := []string{"ns1/web"}
	fail := fmt.Errorf("write assignments: %w", errors.New("etcdserver: request timed out"))
	for attempt := 1; attempt <= 2; attempt++ {
		now := clk.Now()
		l.view.placementTried(keys, fail, now, pol)
		next := now.Add(pol.delay(attempt))
		polltest.Until(t, 10*time.Second, fmt.Sprintf("attempt %d in the status", attempt), func() bool {
			st := e.status("web")
			c := condition(st, ConditionReconciling)
			return st.Attempts == attempt && st.LastReconcileTime != nil && st.LastReconcileTime.Equal(now) &&
				st.NextRetryTime != nil && st.NextRetryTime.Equal(next) &&
				st.RetryReason == "placement failed: write assignments: etcdserver: request timed out" &&
				c != nil && c.Reason == ReasonPlacementFailed && strings.Contains(c.Message, fmt.Sprintf("%d attempts in a row", attempt))
		})
		if due, _ := l.view.dueWakes(next); len(due) != 1 || due[0] != "ns1/web" {
			t.Errorf("attempt %d: passes due at the next try %v, want ns1/web's", attempt, due)
		}
		clk.set(now.Add(time.Second))
	}
	events, err := e.repo.ListEvents(e.ctx, 0)
	if err != nil || !hasEvent(events, ReasonPlacementFailed, "request timed out") {
		t.Errorf("no PlacementFailed event (%v)", err)
	}
	l.view.placementTried(keys, nil, clk.Now(), pol)
	polltest.Until(t, 10*time.Second, "the status clear once a pass succeeded", func() bool {
		st := e.status("web")
		return st.RetryReason == "" && st.NextRetryTime == nil && condition(st, ConditionReconciling) == nil
	})
}

// TestPlacementFailureSurvivesALeaderChange: the record of failed
// placement passes is the workload's status: a new leader's view takes its
// attempts, last attempt, next try and reason from it, asks for a pass at
// the next try, and counts the next failure on from it; a pass that then
// succeeds clears it.
func TestPlacementFailureSurvivesALeaderChange(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	clk := &fakeClock{now: time.Unix(e.base, 0).UTC()}
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	pol := ReplacePolicy{Base: time.Minute, Cap: time.Hour}
	cfg := Config{Now: clk.Now, NodeLossTimeout: time.Hour, Replace: pol}
	l1, stop1 := e.run(cfg)
	polltest.Until(t, 10*time.Second, "the instance placed and the loops idle", func() bool {
		return len(e.assignments("web")) == 1 && l1.idle()
	})
	keys := []string{"ns1/web"}
	fail := errors.New("write assignments: etcdserver: request timed out")
	first := clk.Now()
	l1.view.placementTried(keys, fail, first, pol)
	clk.set(first.Add(time.Second))
	last := clk.Now()
	l1.view.placementTried(keys, fail, last, pol)
	want := PlacementFailure{Attempts: 2, LastAt: last, NextAt: last.Add(pol.delay(2)), Reason: fail.Error()}
	polltest.Until(t, 10*time.Second, "two attempts in the status", func() bool {
		st := e.status("web")
		return st.Attempts == 2 && st.NextRetryTime != nil && st.NextRetryTime.Equal(want.NextAt)
	})
	stop1()

	// The next term's view, before any pass.
	clk.set(last.Add(time.Second))
	l2, err := New(Config{Repo: e.repo, Now: clk.Now, NodeLossTimeout: time.Hour, Replace: pol})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l2.view.run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := l2.view.waitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	got, ok := l2.view.placementFailureOf("ns1/web")
	if !ok || got.Attempts != want.Attempts || !got.LastAt.Equal(want.LastAt) || !got.NextAt.Equal(want.NextAt) || got.Reason != want.Reason {
		t.Fatalf("the new term's record: %+v (%v), want %+v", got, ok, want)
	}
	if due, _ := l2.view.dueWakes(want.NextAt); !slices.Contains(due, "ns1/web") {
		t.Errorf("passes due at the next try %v, want ns1/web's", due)
	}
	now := clk.Now()
	l2.view.placementTried(keys, fail, now, pol)
	if got, _ := l2.view.placementFailureOf("ns1/web"); got.Attempts != 3 || !got.NextAt.Equal(now.Add(pol.delay(3))) {
		t.Errorf("a failure in the new term: %+v, want attempt 3, next try %v", got, now.Add(pol.delay(3)))
	}

	// A leader whose first pass succeeds clears it.
	_, stop3 := e.run(cfg)
	defer stop3()
	polltest.Until(t, 10*time.Second, "the status clear once a pass succeeded", func() bool {
		st := e.status("web")
		return st.Attempts == 0 && st.NextRetryTime == nil && condition(st, ConditionReconciling) == nil
	})
}
