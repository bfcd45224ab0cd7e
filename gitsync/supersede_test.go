package gitsync

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestNewerCommitSupersedes stops an apply in progress when a trigger is
// pending and the remote head has moved past the commit being applied.
func TestNewerCommitSupersedes(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	c1 := r.Commit("one", nil)
	repo := resources.New(storetest.New(t))
	ctx := context.Background()
	if _, err := repo.EnsureNamespace(ctx, resources.NamespaceDefault, nil); err != nil {
		t.Fatal(err)
	}
	spec := Defaulted(api.SourceSpec{Name: "config", URL: r.FileURL(), IntervalSeconds: 3600})
	desired := resources.NewDesiredIndex(repo.Store())
	go func() { _ = desired.Run(t.Context()) }()
	s := newSource(spec, repo, desired, t.TempDir(), zerolog.Nop(), time.Now)
	s.round(ctx)
	t.Cleanup(func() { _ = s.git.Close() })
	if s.status.AppliedCommit != c1 {
		t.Fatalf("applied %q, want %s (error %q)", s.status.AppliedCommit, c1, s.status.LastError)
	}

	const n = 2*applyChunk + 50
	var plan Plan
	for i := range n {
		plan.Apply = append(plan.Apply, Apply{Path: fmt.Sprintf("w%03d", i), Quadlet: testQuadlet(t, "default", fmt.Sprintf("w%03d", i), 1)})
	}
	if _, err := s.execute(ctx, c1, plan); err != nil {
		t.Fatalf("execute without a newer commit: %v", err)
	}

	r.workload("web", "default", "web", 2)
	r.Commit("two", nil)
	s.Trigger()
	plan.Apply = plan.Apply[:0]
	for i := range n {
		plan.Apply = append(plan.Apply, Apply{Path: fmt.Sprintf("x%03d", i), Quadlet: testQuadlet(t, "default", fmt.Sprintf("x%03d", i), 1)})
	}
	res, err := s.execute(ctx, c1, plan)
	if !errors.Is(err, errSuperseded) {
		t.Fatalf("execute with a newer commit pending = %v, want errSuperseded", err)
	}
	if len(res.changed) >= n {
		t.Errorf("wrote all %d workloads of a superseded commit", len(res.changed))
	}
}

// TestFirstSyncRepairsDriftBehindGitsBack deletes a Git-owned workload with
// the API's --force while the leader is down; the next leader's first sync
// compares every directory and writes it again.
func TestFirstSyncRepairsDriftBehindGitsBack(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	r.workload("db", "default", "db", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.waitApplied("config", c1)
	e.stop()
	if _, err := e.repo.DeleteWorkload(context.Background(), resources.DeleteRequest{Namespace: "default", Name: "web", Force: true}); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.eventually("default/web written again", func() string {
		if _, ok := e.generations()["default/web"]; !ok {
			return "missing"
		}
		return ""
	})
}
