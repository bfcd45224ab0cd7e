package gitsync

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Object reading of a repository read in place: a commit reads the trees
// on the path to what changed and the changed directories, nothing worth
// keeping for long; a large object (the tree of a directory of thousands of
// workloads) is read straight into its caller's buffer rather than copied
// into the cache.
const (
	localCacheBytes  = 1 * cache.MiByte
	localLargeObject = 64 << 10
)

// localRepoDir returns the Git directory of a file:// URL's repository on
// this machine: the directory itself for a bare repository, its .git for one
// with a work tree. It returns "" for other URLs and for a path that holds
// no repository (the clone's fetch then reports why).
func localRepoDir(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "file" || u.Host != "" || !filepath.IsAbs(u.Path) {
		return ""
	}
	for _, dir := range []string{filepath.Join(u.Path, ".git"), u.Path} {
		if fi, err := os.Stat(filepath.Join(dir, "objects")); err == nil && fi.IsDir() {
			return dir
		}
	}
	return ""
}

// openLocal opens the repository in dir (localRepoDir) where it is, for
// reading only: a file:// source is not cloned, as git clone --local shares
// a local repository's objects rather than copying them, so a commit costs
// neither git-upload-pack's pack nor its parsing. Nothing is ever written
// there; other processes may write at the same time (it is opened without
// exclusive access, and refresh makes a pack a push added visible).
func openLocal(dir, rawURL, branch string) (*gitRepo, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(localCacheBytes),
		filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: localLargeObject})
	r, err := git.Open(st, nil)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &gitRepo{dir: dir, url: rawURL, branch: branch, st: st, repo: r}, nil
}

// branchHead reads the branch head of a repository opened in place.
func (g *gitRepo) branchHead() (plumbing.Hash, error) {
	ref, err := g.repo.Reference(plumbing.NewBranchReferenceName(g.branch), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, fmt.Errorf("branch %q not found in %s", g.branch, g.dir)
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read branch %q of %s: %w", g.branch, g.dir, err)
	}
	return ref.Hash(), nil
}

// refresh makes a repository opened in place see the packs added since it
// listed them (a push of many objects, a git gc), and closes the files of
// those removed.
func (g *gitRepo) refresh() {
	_ = g.st.Close() // the storage opens what it needs again
	g.st.Reindex()
}
