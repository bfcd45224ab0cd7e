package gitsync

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func condition(conds []api.Condition, typ string) *api.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// TestSyncOverHTTP walks one source through the life of a config repo
// served by git http-backend: first sync, a change, a prune, a broken and a
// fixed directory, a force-push and an unreachable server.
func TestSyncOverHTTP(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	srv, url := newGitServer(t, r)
	r.WriteFile("demo/namespace.kat", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: demo\n"))
	r.workload("apps/web", "default", "web", 1)
	r.workload("apps/db", "default", "db", 1)
	r.workload("demo/cron", "demo", "cron", 1)
	c1 := r.Commit("first", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: url})
	ctx := context.Background()

	t.Run("a push is applied", func(t *testing.T) {
		st := e.waitApplied("config", c1)
		if st.Workloads != 3 || len(st.PathErrors) != 0 || st.FetchedCommit != c1 || st.LastFetchTime.IsZero() {
			t.Errorf("status = %+v, want 3 workloads, no errors, fetched %s", st, c1)
		}
		w, err := e.repo.GetWorkload(ctx, "demo", "cron")
		if err != nil {
			t.Fatal(err)
		}
		want := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "demo/cron", Commit: c1}
		if w.Owner != want {
			t.Errorf("owner = %+v, want %+v", w.Owner, want)
		}
		if c := condition(st.Conditions, CondReady); c == nil || c.Status != api.ConditionTrue {
			t.Errorf("Ready = %+v, want True", c)
		}
	})

	t.Run("a change moves only its workload's generation", func(t *testing.T) {
		before := e.generations()
		r.workload("apps/web", "default", "web", 3)
		c2 := r.Commit("scale web", nil)
		e.waitApplied("config", c2)
		after := e.generations()
		for k, g := range before {
			want := g
			if k == "default/web" {
				want = g + 1
			}
			if after[k] != want {
				t.Errorf("generation of %s = %d, want %d", k, after[k], want)
			}
		}
		evs, err := e.repo.ListEvents(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if last := evs[len(evs)-1]; last.Reason != ReasonApplied || !strings.Contains(last.Message, "default/web") || strings.Contains(last.Message, "default/db") {
			t.Errorf("last event = %+v, want Applied naming only default/web", last)
		}
	})

	t.Run("a deleted directory is pruned", func(t *testing.T) {
		r.Remove("apps/db")
		c3 := r.Commit("drop db", nil)
		st := e.waitApplied("config", c3)
		if _, ok := e.generations()["default/db"]; ok || st.Workloads != 2 {
			t.Errorf("default/db still there (workloads %d), want it pruned", st.Workloads)
		}
	})

	t.Run("a broken directory leaves the others applied", func(t *testing.T) {
		before := e.generations()
		r.WriteFile("apps/web/workload.kat", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata:\n  name: web\nspec:\n  type: Service\n  replicas: -1\n"))
		r.workload("apps/api", "default", "api", 1)
		c4 := r.Commit("break web, add api", nil)
		st := e.waitApplied("config", c4)
		if len(st.PathErrors) != 1 || st.PathErrors[0].Path != "apps/web" || !strings.Contains(st.PathErrors[0].Error, "apps/web/workload.kat:") {
			t.Fatalf("path errors = %+v, want one for apps/web naming apps/web/workload.kat:LINE", st.PathErrors)
		}
		gens := e.generations()
		if gens["default/web"] != before["default/web"] || gens["default/api"] != 1 {
			t.Errorf("generations = %v: web must keep %d, api must be applied", gens, before["default/web"])
		}
		if c := condition(st.Conditions, CondReady); c == nil || c.Reason != ReasonPathErrors {
			t.Errorf("source Ready = %+v, want reason %s", c, ReasonPathErrors)
		}

		// A commit that touches another directory keeps the error.
		r.workload("apps/api", "default", "api", 2)
		c5 := r.Commit("scale api", nil)
		if st := e.waitApplied("config", c5); len(st.PathErrors) != 1 {
			t.Errorf("path errors after an unrelated commit = %+v, want apps/web's kept", st.PathErrors)
		}

		r.workload("apps/web", "default", "web", 2)
		c6 := r.Commit("fix web", nil)
		st = e.waitApplied("config", c6)
		if len(st.PathErrors) != 0 {
			t.Errorf("path errors after the fix = %+v, want none", st.PathErrors)
		}
	})

	t.Run("a force-push converges", func(t *testing.T) {
		r.Git(r.Work, "reset", "-q", "--hard", c1)
		r.workload("apps/other", "default", "other", 1)
		c7 := r.Commit("rewritten history", nil)
		st := e.waitApplied("config", c7)
		gens := e.generations()
		for _, k := range []string{"default/web", "default/db", "demo/cron", "default/other"} {
			if _, ok := gens[k]; !ok {
				t.Errorf("%s missing after the force-push: %v", k, gens)
			}
		}
		if _, ok := gens["default/api"]; ok {
			t.Errorf("default/api survived a history without it")
		}
		if st.Workloads != 4 {
			t.Errorf("workloads = %d, want 4", st.Workloads)
		}
	})

	t.Run("an unreachable server keeps the applied state and recovers", func(t *testing.T) {
		before := e.generations()
		srv.SetDown(true)
		r.workload("apps/web", "default", "web", 5)
		c8 := r.Commit("while down", nil)
		e.eventually("fetch failure reported", func() string {
			c := condition(e.source("config").Status.Conditions, CondReady)
			if c == nil || c.Reason != ReasonFetchFailed {
				return fmt.Sprintf("Ready %+v", c)
			}
			return ""
		})
		if got := e.generations(); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("generations changed while the server was down: %v -> %v", before, got)
		}
		if st := e.source("config").Status; st.LastError == "" || st.AppliedCommit == c8 {
			t.Errorf("status while down = %+v, want an error and the old commit", st)
		}
		srv.SetDown(false)
		st := e.waitApplied("config", c8)
		if st.LastError != "" || condition(st.Conditions, CondReady).Status != api.ConditionTrue {
			t.Errorf("status after recovery = %+v, want Ready and no error", st)
		}
	})
}

func TestPruneAllRefused(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.waitApplied("config", c1)

	r.Remove("web")
	r.WriteFile("README.md", []byte("empty\n"))
	c2 := r.Commit("delete everything", nil)
	e.eventually("prune refused", func() string {
		st := e.source("config").Status
		if st.LastAttemptedCommit != c2 || condition(st.Conditions, CondStalled) == nil {
			return fmt.Sprintf("status %+v", st)
		}
		return ""
	})
	if _, ok := e.generations()["default/web"]; !ok {
		t.Fatal("default/web was pruned by a commit deleting every workload")
	}
	evs, _ := e.repo.ListEvents(context.Background(), 0)
	if last := evs[len(evs)-1]; last.Reason != ReasonPruneRefused || last.Type != api.EventWarning {
		t.Errorf("last event = %+v, want a PruneRefused warning", last)
	}

	spec := e.source("config").Spec
	spec.AllowPruneAll = true
	e.addSource(spec)
	e.waitApplied("config", c2)
	if _, ok := e.generations()["default/web"]; ok {
		t.Error("default/web not pruned although the source allows it")
	}
}

func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.waitApplied("config", c1)
	ctx := context.Background()

	// The API refuses, then --force takes over and suspends.
	q := testQuadlet(t, "default", "web", 7)
	if _, err := e.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err == nil {
		t.Fatal("API apply of a Git-owned workload succeeded, want 409")
	}
	if _, err := e.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Force: true}); err != nil {
		t.Fatal(err)
	}
	r.workload("web", "default", "web", 2)
	c2 := r.Commit("git changes web", nil)
	e.waitApplied("config", c2)
	w, _ := e.repo.GetWorkload(ctx, "default", "web")
	if w.SpecHash != q.SpecHash() || !w.Suspended {
		t.Fatalf("suspended workload was overwritten by Git: %+v", w.WorkloadMeta)
	}

	if _, err := e.m.Resume(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	want := testQuadlet(t, "default", "web", 2).SpecHash()
	e.eventually("Git's version applied again", func() string {
		w, _ := e.repo.GetWorkload(ctx, "default", "web")
		if w.SpecHash != want || w.Suspended {
			return fmt.Sprintf("suspended=%v", w.Suspended)
		}
		return ""
	})

	if _, err := e.m.Suspend(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if w, _ := e.repo.GetWorkload(ctx, "default", "web"); !w.Suspended {
		t.Error("suspend did not suspend")
	}
}

// TestMissingNamespaceThenAdded: a workload in a namespace that does not
// exist is a path error; the commit adding only namespace.kat applies it.
func TestMissingNamespaceThenAdded(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("apps/web", "default", "web", 1)
	r.workload("late/job", "late", "job", 1)
	c1 := r.Commit("late namespace missing", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	st := e.waitApplied("config", c1)
	if len(st.PathErrors) != 1 || st.PathErrors[0].Path != "late/job" || !strings.Contains(st.PathErrors[0].Error, `namespace "late"`) {
		t.Fatalf("path errors = %+v, want late/job naming the namespace", st.PathErrors)
	}
	r.WriteFile("late/namespace.kat", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: late\n"))
	c2 := r.Commit("add namespace late", nil)
	if st := e.waitApplied("config", c2); len(st.PathErrors) != 0 {
		t.Errorf("path errors = %+v, want none", st.PathErrors)
	}
	if _, ok := e.generations()["late/job"]; !ok {
		t.Error("late/job not applied once its namespace exists")
	}
}
