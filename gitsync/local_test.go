package gitsync

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// tree renders every file under dir with its size and modification time.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %d %d\n", p, info.Size(), info.ModTime().UnixNano())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestLocalSourceIsReadInPlace: a file:// source is read where it is:
// nothing is cloned into the data directory and nothing is written to the
// repository; pushes of loose objects and a repository repacked by git gc
// (its old packs gone) are applied all the same, and so is a repository
// with a work tree.
func TestLocalSourceIsReadInPlace(t *testing.T) {
	r := newTestRemote(t)
	r.workload("apps/web", "default", "web", 1)
	r.workload("apps/db", "default", "db", 1)
	c1 := r.Commit("one", nil)
	r.Git(r.Bare, "gc", "-q") // a pack the source indexes at once
	e := newEnv(t)
	before := tree(t, r.Bare)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.waitApplied("config", c1)
	if after := tree(t, r.Bare); after != before {
		t.Errorf("the repository changed while read:\n%s\nwas\n%s", after, before)
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "config")); !os.IsNotExist(err) {
		t.Errorf("a clone of a file:// source was made: %v", err)
	}

	r.workload("apps/web", "default", "web", 2)
	c2 := r.Commit("two", nil)
	e.waitApplied("config", c2)
	r.workload("apps/db", "default", "db", 3)
	c3 := r.Commit("three", nil)
	r.Git(r.Bare, "gc", "-q", "--prune=now")
	e.waitApplied("config", c3)
	if g := e.generations(); g["default/web"] != 2 || g["default/db"] != 2 {
		t.Errorf("generations %v, want web 2 and db 2", g)
	}

	e.addSource(api.SourceSpec{Name: "work", URL: "file://" + r.Work, Branch: "main"})
	e.eventually("the work tree's repository read", func() string {
		if st := e.source("work").Status; st.FetchedCommit != c3 {
			return fmt.Sprintf("fetched %q (last error %q)", st.FetchedCommit, st.LastError)
		}
		return ""
	})
}

// TestLocalSourceSyncsWhenTheRefMoves: a file:// source polled once an
// hour applies a commit (in a bare repository and in one with a work tree,
// before and after git gc packed the refs) without waiting for the poll, a webhook or
// katcall sync: its branch ref is watched. Nothing here triggers a sync.
func TestLocalSourceSyncsWhenTheRefMoves(t *testing.T) {
	r := newTestRemote(t)
	r.workload("apps/web", "default", "web", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL(), IntervalSeconds: 3600})
	e.addSource(api.SourceSpec{Name: "work", URL: "file://" + r.Work, Branch: "main", IntervalSeconds: 3600})
	waitUntriggered := func(t *testing.T, name, commit string) {
		t.Helper()
		polltest.UntilErr(t, 60*time.Second, "source "+name+" applies "+api.ShortCommit(commit)+" untriggered", func() error {
			if st := e.source(name).Status; st.AppliedCommit != commit {
				return fmt.Errorf("applied %q (last error %q)", api.ShortCommit(st.AppliedCommit), st.LastError)
			}
			return nil
		})
	}
	waitUntriggered(t, "config", c1) // the first sync, as the loop starts
	waitUntriggered(t, "work", c1)

	for i, step := range []struct {
		name   string
		before func()
	}{
		{"a loose ref", func() {}},
		{"a loose ref over refs git gc packed", func() { r.Git(r.Bare, "gc", "-q"); r.Git(r.Work, "gc", "-q") }},
	} {
		t.Run(step.name, func(t *testing.T) {
			step.before()
			r.workload("apps/web", "default", "web", i+2)
			c := r.Commit(step.name, nil)
			waitUntriggered(t, "config", c)
			waitUntriggered(t, "work", c)
		})
	}
}

// TestUnreadableObjectRetriesTheCommit: a workload file whose object cannot
// be read (as when git gc repacks a repository read in place under the
// reader) fails the commit, to be read again, rather than marking the
// directory bad and applying the commit without it: once the object is
// back, the same commit applies the directory.
func TestUnreadableObjectRetriesTheCommit(t *testing.T) {
	r := newTestRemote(t)
	r.workload("apps/web", "default", "web", 1)
	r.workload("apps/db", "default", "db", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.waitApplied("config", c1)

	// The commit's objects reach the repository under a branch the source
	// does not follow; main moves to the commit only once its object is
	// hidden, so the source never reads the commit whole.
	r.workload("apps/db", "default", "db", 3)
	r.Git(r.Work, "add", "-A")
	r.Git(r.Work, "commit", "-q", "-m", "two")
	c2 := r.Git(r.Work, "rev-parse", "HEAD")
	r.Git(r.Work, "push", "-q", "origin", "HEAD:refs/heads/staged")
	blob := strings.TrimSpace(r.Git(r.Bare, "rev-parse", c2+":apps/db/workload.kat"))
	obj := filepath.Join(r.Bare, "objects", blob[:2], blob[2:])
	if err := os.Rename(obj, obj+".away"); err != nil {
		t.Fatalf("hide the object of apps/db/workload.kat: %v", err)
	}
	r.Git(r.Bare, "update-ref", "refs/heads/main", c2)
	e.eventually("the commit fails on the missing object", func() string {
		st := e.source("config").Status
		if st.LastAttemptedCommit != c2 || !strings.Contains(st.LastError, "apps/db") {
			return fmt.Sprintf("attempted %q, last error %q", api.ShortCommit(st.LastAttemptedCommit), st.LastError)
		}
		return ""
	})
	st := e.source("config").Status
	if st.AppliedCommit != c1 || len(st.PathErrors) != 0 {
		t.Fatalf("applied %s with path errors %v; want %s still applied and none", api.ShortCommit(st.AppliedCommit), st.PathErrors, api.ShortCommit(c1))
	}

	if err := os.Rename(obj+".away", obj); err != nil {
		t.Fatal(err)
	}
	e.waitApplied("config", c2)
	if g := e.generations(); g["default/db"] != 2 {
		t.Errorf("generations %v, want db 2", g)
	}
	if st := e.source("config").Status; len(st.PathErrors) != 0 || st.LastError != "" {
		t.Errorf("path errors %v, last error %q after the object came back", st.PathErrors, st.LastError)
	}
}
