package gitsync

import (
	"context"
	"maps"
	"path/filepath"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/gitx"
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

	g, err := openRepo(filepath.Join(t.TempDir(), "clone"), r.FileURL(), "main", gitx.Auth{})
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
	full, incr := list(c2, nil), list(c2, &l1)
	if !maps.Equal(full.Dirs, incr.Dirs) || !maps.Equal(full.Namespaces, incr.Namespaces) || !maps.Equal(full.Trees, incr.Trees) {
		t.Errorf("incremental listing %+v differs from full listing %+v", incr, full)
	}
	if err := g.repack(); err != nil {
		t.Fatalf("repack: %v", err)
	}
	if again := list(c2, nil); !maps.Equal(again.Dirs, full.Dirs) {
		t.Errorf("listing after a repack = %v, want %v", again.Dirs, full.Dirs)
	}
	if ch := ChangedPaths(&l1, incr); len(ch.Dirs) != 2 || ch.Dirs[0] != "ns2/d" || ch.Dirs[1] != "ns3/e" {
		t.Errorf("changed = %v, want [ns2/d ns3/e]", ch.Dirs)
	}
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
