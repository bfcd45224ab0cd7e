package gitsync

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"

	"kat.dws.rip/kat/gitx"
)

// Object reading of a repository read in place: a commit reads the trees
// on the path to what changed and the changed directories, nothing worth
// keeping for long; a large object (the tree of a directory of thousands of
// workloads) is read straight into its caller's buffer rather than copied
// into the cache.
const (
	localCacheBytes  = 256 * cache.KiByte
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
// reading only (gitx.OpenInPlace): a file:// source is not cloned. Nothing
// is ever written there.
func openLocal(dir, rawURL, branch string) (*gitRepo, error) {
	r, err := gitx.OpenInPlace(dir, rawURL, localCacheBytes, localLargeObject)
	if err != nil {
		return nil, err
	}
	return &gitRepo{Repo: r, branch: branch, dir: dir}, nil
}

// branchHead reads the branch head of a repository opened in place.
func (g *gitRepo) branchHead() (plumbing.Hash, error) {
	ref, err := g.Git.Reference(plumbing.NewBranchReferenceName(g.branch), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return plumbing.ZeroHash, fmt.Errorf("branch %q not found in %s", g.branch, g.dir)
	}
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("read branch %q of %s: %w", g.branch, g.dir, err)
	}
	return ref.Hash(), nil
}
