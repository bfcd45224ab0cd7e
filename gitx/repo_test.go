package gitx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx/gittest"
)

// TestFetchCommit fetches an older commit by hash from a real Git smart-HTTP
// server: alone at depth 1 when the server serves commits by hash, every
// branch and tag in full otherwise.
func TestFetchCommit(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	tests := []struct {
		name     string
		allowSHA bool
		commit   string
		shallow  bool
		err      error
	}{
		{name: "by hash at depth 1", allowSHA: true, commit: h.first, shallow: true},
		{name: "commit no ref points at, by hash", allowSHA: true, commit: h.bare, shallow: true},
		{name: "fallback to every branch and tag", commit: h.bare},
		{name: "unknown commit", commit: strings.Repeat("e", 40), err: ErrCommitNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := gittest.Serve(t, h.Repo, gittest.ServerOptions{AllowSHA: tc.allowSHA})
			dir := t.TempDir()
			repo, err := Init(filepath.Join(dir, "git"), "", srv.RepoURL, api.GitAuth{})
			if err != nil {
				t.Fatal(err)
			}
			defer repo.Close()
			want := plumbing.NewHash(tc.commit)
			shallow, err := repo.FetchCommit(t.Context(), want)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), srv.RepoURL) {
					t.Fatalf("FetchCommit: %v; want %v naming the URL", err, tc.err)
				}
				return
			}
			if err != nil || shallow != tc.shallow {
				t.Fatalf("FetchCommit: shallow=%t, %v; want shallow=%t", shallow, err, tc.shallow)
			}
			c, err := repo.Git.CommitObject(want)
			if err != nil {
				t.Fatalf("commit not in the repository: %v", err)
			}
			_, perr := c.Parent(0)
			if hasParent := perr == nil; hasParent == tc.shallow {
				t.Errorf("parent of the commit present: %t (%v); want %t", hasParent, perr, !tc.shallow)
			}
		})
	}
}

// TestFetchBranch keeps a bare clone of a branch over file:// and fetches
// again after a force-push; Open reopens the clone as it is, and starts
// anew when its origin differs.
func TestFetchBranch(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	dir := filepath.Join(t.TempDir(), "clone")
	const spec = "+refs/heads/main:refs/remotes/origin/main"
	head := func(repo *Repo) string {
		t.Helper()
		ref, err := repo.Git.Reference("refs/remotes/origin/main", true)
		if err != nil {
			return ""
		}
		return ref.Hash().String()
	}
	repo, err := Open(dir, h.FileURL(), api.GitAuth{})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Fetch(t.Context(), 0, spec); err != nil || head(repo) != h.second {
		t.Fatalf("fetch: head %s, %v; want %s", head(repo), err, h.second)
	}
	if err := repo.Fetch(t.Context(), 0, spec); err != nil {
		t.Fatalf("fetch again, up to date: %v", err)
	}
	h.Git(h.Work, "reset", "-q", "--hard", h.zero)
	rewritten := h.Commit("rewritten", map[string]string{"new": "x\n"})
	if err := repo.Fetch(t.Context(), 0, spec); err != nil || head(repo) != rewritten {
		t.Fatalf("fetch after a force-push: head %s, %v; want %s", head(repo), err, rewritten)
	}
	_ = repo.Close()

	repo, err = Open(dir, h.FileURL(), api.GitAuth{})
	if err != nil || head(repo) != rewritten {
		t.Fatalf("reopened: head %s, %v; want %s", head(repo), err, rewritten)
	}
	_ = repo.Close()
	other := gittest.NewRepo(t, "other")
	repo, err = Open(dir, other.FileURL(), api.GitAuth{})
	if err != nil || head(repo) != "" {
		t.Fatalf("opened for another URL: head %q, %v; want a new, empty clone", head(repo), err)
	}
	defer repo.Close()
	if err := repo.Fetch(t.Context(), 1, spec); err == nil || !strings.Contains(err.Error(), "fetch "+spec+" from "+other.FileURL()) {
		t.Errorf("fetch of a missing branch: %v, want an error saying what and from where", err)
	}
	if err := repo.Fetch(t.Context(), 0, "no-colon-*"); !errors.Is(err, ErrInvalid) {
		t.Errorf("malformed refspec: %v, want ErrInvalid", err)
	}
}

// TestOpenDamaged starts a clone whose storage is broken again.
func TestOpenDamaged(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	dir := filepath.Join(t.TempDir(), "clone")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte("[not git config"), 0o600); err != nil {
		t.Fatal(err)
	}
	repo, err := Open(dir, h.FileURL(), api.GitAuth{})
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	if _, err := repo.FetchCommit(t.Context(), plumbing.NewHash(h.second)); err != nil {
		t.Fatal(err)
	}
}

// TestSSH lists and fetches over SSH with the host key checked against
// known_hosts, and refuses a server whose key known_hosts does not list.
func TestSSH(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	srv := gittest.ServeSSH(t, h.Repo)
	dir := t.TempDir()
	key := writeFile(t, dir, "id", string(srv.ClientKeyPEM))
	good := api.GitAuth{SSHKeyFile: key, KnownHostsFile: writeFile(t, dir, "known_hosts", srv.KnownHostsLine()+"\n")}

	got, err := Resolve(t.Context(), srv.RepoURL, good, Ref{Tag: "v1"})
	if err != nil || got.String() != h.first {
		t.Fatalf("Resolve over ssh: %v, %v; want %s", got, err, h.first)
	}
	repo, err := Init(filepath.Join(dir, "git"), "", srv.RepoURL, good)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	if _, err := repo.FetchCommit(t.Context(), plumbing.NewHash(h.bare)); err != nil {
		t.Fatalf("FetchCommit over ssh: %v", err)
	}

	otherKey, _ := gittest.NewKey(t)
	impostor := *srv
	impostor.HostKey = otherKey
	wrongKey := api.GitAuth{SSHKeyFile: key, KnownHostsFile: writeFile(t, dir, "wrong_hosts", impostor.KnownHostsLine()+"\n")}
	_, err = ListRefs(t.Context(), srv.RepoURL, wrongKey)
	if err == nil || errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "list refs of "+srv.RepoURL) || !strings.Contains(err.Error(), "key mismatch") {
		t.Errorf("ListRefs from a host with another key: %v; want a refusal naming the URL", err)
	}
	_, clientPEM := gittest.NewKey(t)
	otherClient := api.GitAuth{SSHKeyFile: writeFile(t, dir, "other_id", string(clientPEM)), KnownHostsFile: good.KnownHostsFile}
	if _, err := ListRefs(t.Context(), srv.RepoURL, otherClient); err == nil {
		t.Error("ListRefs with a key the server does not accept succeeded")
	}
	if _, err := ListRefs(t.Context(), srv.RepoURL, api.GitAuth{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ListRefs over ssh without a key: %v, want ErrInvalid", err)
	}
}

// TestReadObject: an object read in place is the same whether it is loose
// (read from its file) or packed (read through go-git), and a hash of
// another type is not found; Reset refuses a repository opened in place.
func TestReadObject(t *testing.T) {
	t.Parallel()
	r := gittest.NewRepo(t, "cfg")
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("apps/w%03d/workload.kat", i)] = fmt.Sprintf("n: %d\n", i)
	}
	r.Commit("many", files)
	// git leaves what it received loose (fewer than unpackLimit objects are
	// written one a file): push a one-file change so the new trees are loose.
	commit := r.Commit("one", map[string]string{"apps/w007/workload.kat": "n: seven\n"})
	repo, err := OpenInPlace(r.Bare, r.FileURL(), 1<<20, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	c, err := repo.Git.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := c.Tree()
	if err != nil {
		t.Fatal(err)
	}
	apps, err := tree.Tree("apps")
	if err != nil {
		t.Fatal(err)
	}
	hs := apps.Hash.String()
	if _, err := os.Stat(filepath.Join(r.Bare, "objects", hs[:2], hs[2:])); err != nil {
		t.Fatalf("the changed tree is not loose, the test tests nothing: %v", err)
	}
	want := encoded(t, repo, apps.Hash)
	got, err := repo.ReadObject(plumbing.TreeObject, apps.Hash)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("loose: %d bytes, %v; want go-git's %d bytes", len(got), err, len(want))
	}
	if _, err := repo.ReadObject(plumbing.BlobObject, apps.Hash); !errors.Is(err, plumbing.ErrObjectNotFound) {
		t.Errorf("a tree read as a blob: %v, want ErrObjectNotFound", err)
	}

	r.Git(r.Bare, "gc", "--quiet", "--prune=now")
	repo.Refresh()
	if _, err := os.Stat(filepath.Join(r.Bare, "objects", hs[:2], hs[2:])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("git gc left the tree loose: %v", err)
	}
	got, err = repo.ReadObject(plumbing.TreeObject, apps.Hash)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("packed: %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	if err := repo.Reset(); err == nil {
		t.Error("Reset of a repository opened in place succeeded")
	}
}

// encoded reads object h's content through go-git.
func encoded(t *testing.T, repo *Repo, h plumbing.Hash) []byte {
	t.Helper()
	o, err := repo.Git.Storer.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := o.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
