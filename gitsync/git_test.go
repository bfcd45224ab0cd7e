package gitsync

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/api"
)

// TestIncrementalListingEqualsFullListing lists a commit once from scratch
// and once reusing the previous commit's listing; both must be equal.
func TestIncrementalListingEqualsFullListing(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.WriteFile("ns1/namespace.kat", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: ns1\n"))
	r.workload("ns1/a", "ns1", "a", 1)
	r.workload("ns1/deep/b", "ns1", "b", 1)
	r.workload("ns2/c", "default", "c", 1)
	r.workload("ns2/d", "default", "d", 1)
	r.WriteFile(".hidden/x/workload.kat", []byte("ignored"))
	c1 := r.Commit("one", nil)
	r.workload("ns2/d", "default", "d", 2)
	r.Remove("ns1/deep")
	r.workload("ns3/e", "default", "e", 1)
	c2 := r.Commit("two", nil)

	g, err := openRepo(filepath.Join(t.TempDir(), "clone"), r.FileURL(), "main", api.GitAuth{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.fetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	list := func(hash string, prev *Listing) Listing {
		t.Helper()
		c, err := g.Git.CommitObject(plumbingHash(hash))
		if err != nil {
			t.Fatal(err)
		}
		l, err := g.listTree(c, ".", prev)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l1 := list(c1, nil)
	if want := []string{"ns1/a", "ns1/deep/b", "ns2/c", "ns2/d"}; !sameKeys(l1.Dirs, want) {
		t.Fatalf("dirs of c1 = %v, want %v", l1.Dirs, want)
	}
	l1c, l1c0 := cloneListing(l1), cloneListing(l1)
	full, incr := list(c2, nil), list(c2, &l1c)
	if !maps.Equal(full.Dirs, incr.Dirs) || !maps.Equal(full.Namespaces, incr.Namespaces) || !maps.Equal(full.Trees, incr.Trees) {
		t.Errorf("incremental listing %+v differs from full listing %+v", incr, full)
	}
	if err := g.repack(); err != nil {
		t.Fatalf("repack: %v", err)
	}
	if again := list(c2, nil); !maps.Equal(again.Dirs, full.Dirs) {
		t.Errorf("listing after a repack = %v, want %v", again.Dirs, full.Dirs)
	}
	if ch := ChangedPaths(&l1c0, incr); len(ch.Dirs) != 2 || ch.Dirs[0] != "ns2/d" || ch.Dirs[1] != "ns3/e" {
		t.Errorf("changed = %v, want [ns2/d ns3/e]", ch.Dirs)
	}
}

// TestIncrementalListingFollowsEveryChange lists a series of commits, each
// from the previous commit's listing, through every kind of change a tree
// can see; after each the listing must equal the one made from scratch.
func TestIncrementalListingFollowsEveryChange(t *testing.T) {
	r := newTestRemote(t)
	ns := func(name string) []byte {
		return []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: " + name + "\n")
	}
	steps := []struct {
		name   string
		change func()
	}{
		{"first", func() {
			r.WriteFile("ns1/namespace.kat", ns("ns1"))
			for _, d := range []string{"apps/a", "apps/b", "apps/c", "ns1/x", "deep/one/two/w"} {
				r.workload(d, "default", strings.ReplaceAll(d, "/", "-"), 1)
			}
		}},
		{"one directory of many changes", func() { r.workload("apps/b", "default", "apps-b", 2) }},
		{"a directory added and one removed", func() {
			r.workload("apps/d", "default", "apps-d", 1)
			r.Remove("apps/a")
		}},
		{"a deep directory changes", func() { r.workload("deep/one/two/w", "default", "deep-one-two-w", 3) }},
		{"a subtree removed", func() { r.Remove("deep") }},
		{"a workload directory becomes a plain one", func() {
			r.Remove("apps/c/workload.kat")
			r.workload("apps/c/inner", "default", "apps-c-inner", 1)
		}},
		{"a plain directory becomes a workload", func() {
			r.Remove("apps/c/inner")
			r.workload("apps/c", "default", "apps-c", 4)
		}},
		{"a namespace file changes, one goes", func() {
			r.WriteFile("ns1/namespace.kat", ns("ns1b"))
			r.WriteFile("apps/namespace.kat", ns("apps"))
		}},
		{"a namespace file removed", func() { r.Remove("apps/namespace.kat") }},
		{"a file replaced by a directory of the same name", func() {
			r.WriteFile("apps/e", []byte("a file"))
		}},
		{"and back", func() {
			r.Remove("apps/e")
			r.workload("apps/e", "default", "apps-e", 1)
		}},
		{"hidden directories are skipped", func() { r.workload(".hidden/w", "default", "hidden", 1) }},
	}
	g, err := openRepo(filepath.Join(t.TempDir(), "clone"), r.FileURL(), "main", api.GitAuth{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var prev *Listing
	for _, st := range steps {
		st.change()
		head := r.Commit(st.name, nil)
		if _, err := g.fetch(context.Background()); err != nil {
			t.Fatal(err)
		}
		c, err := g.Git.CommitObject(plumbingHash(head))
		if err != nil {
			t.Fatal(err)
		}
		full, err := g.listTree(c, ".", nil)
		if err != nil {
			t.Fatal(err)
		}
		var before *Listing
		if prev != nil {
			b := cloneListing(*prev)
			before = &b
		}
		incr, diff, err := g.listChanges(c, ".", prev)
		if err != nil {
			t.Fatal(err)
		}
		if ch := ChangedPaths(before, incr); !slices.Equal(ch.Dirs, diff.dirs) || !slices.Equal(ch.Namespaces, diff.namespaces) {
			t.Errorf("%s: changes found while listing %v %v, want ChangedPaths' %v %v", st.name, diff.dirs, diff.namespaces, ch.Dirs, ch.Namespaces)
		}
		var gone []string
		if before != nil {
			for p := range before.Dirs {
				if _, ok := incr.Dirs[p]; !ok {
					gone = append(gone, p)
				}
			}
		}
		if slices.Sort(gone); !slices.Equal(gone, diff.removed) {
			t.Errorf("%s: removed %v, want %v", st.name, diff.removed, gone)
		}
		if !maps.Equal(full.Dirs, incr.Dirs) || !maps.Equal(full.Namespaces, incr.Namespaces) || !maps.Equal(full.Trees, incr.Trees) ||
			!slices.Equal(slices.Sorted(maps.Keys(full.raw)), slices.Sorted(maps.Keys(incr.raw))) {
			t.Fatalf("%s: incremental listing\n%v %v %v\ndiffers from the full listing\n%v %v %v", st.name,
				incr.Dirs, incr.Namespaces, incr.Trees, full.Dirs, full.Namespaces, full.Trees)
		}
		if _, hidden := full.Dirs[".hidden/w"]; hidden {
			t.Fatalf("%s: a hidden directory was listed", st.name)
		}
		prev = &incr
	}
	if want := []string{"apps/b", "apps/c", "apps/d", "apps/e", "ns1/x"}; !sameKeys(prev.Dirs, want) {
		t.Errorf("final dirs %v, want %v", slices.Sorted(maps.Keys(prev.Dirs)), want)
	}
}

// cloneListing copies l: listing a commit from l consumes it.
func cloneListing(l Listing) Listing {
	return Listing{Dirs: maps.Clone(l.Dirs), Namespaces: maps.Clone(l.Namespaces), Trees: maps.Clone(l.Trees), raw: maps.Clone(l.raw)}
}

func sameKeys(m map[string]string, keys []string) bool {
	if len(m) != len(keys) {
		return false
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

func plumbingHash(s string) plumbing.Hash { return plumbing.NewHash(s) }
