package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
)

// checkout puts the tree of commit into srcDir, with the repository's
// objects in gitDir (outside srcDir, so .git is not part of the build
// context). With ref, it first fetches the ref's head alone at depth 1,
// which works with any server while the ref has not moved on; otherwise it
// fetches the commit (gitx.Repo.FetchCommit: alone at depth 1 when the
// server allows fetching by hash, else every branch and tag in full).
// shallow tells whether the fetch was at depth 1. Credentials that retrying
// cannot fix are an ErrInvalid.
func checkout(ctx context.Context, repoURL, commit, ref string, auth api.GitAuth, gitDir, srcDir string, log io.Writer) (shallow bool, err error) {
	shallow, err = fetchAndCheckout(ctx, repoURL, plumbing.NewHash(commit), ref, auth, gitDir, srcDir, log)
	// A missing credential file may still be provisioned: only the rest
	// of gitx's invalid input stalls the build.
	if errors.Is(err, gitx.ErrInvalid) && !errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return shallow, err
}

func fetchAndCheckout(ctx context.Context, repoURL string, h plumbing.Hash, ref string, auth api.GitAuth, gitDir, srcDir string, log io.Writer) (bool, error) {
	url := gitx.RedactURL(repoURL)
	if ref != "" {
		// The ref's head at depth 1, in a repository of its own (a
		// shallow one cannot fetch the history behind it): the commit,
		// unless the ref moved on since it was resolved.
		fmt.Fprintf(log, "fetching %s of %s\n", ref, url)
		found, err := checkoutRef(ctx, repoURL, ref, h, auth, gitDir+"-ref", srcDir)
		switch {
		case found:
			fmt.Fprintf(log, "checked out %s (shallow=true)\n", h)
			return true, nil
		case ctx.Err() != nil, errors.Is(err, gitx.ErrInvalid):
			return false, err
		case err != nil:
			fmt.Fprintf(log, "%v\n", err)
		default:
			fmt.Fprintf(log, "%s moved on from %s\n", ref, api.ShortCommit(h.String()))
		}
	}
	repo, err := gitx.Init(gitDir, srcDir, repoURL, auth)
	if err != nil {
		return false, err
	}
	defer repo.Close()
	fmt.Fprintf(log, "fetching commit %s from %s\n", h, url)
	shallow, err := repo.FetchCommit(ctx, h)
	if err != nil {
		return shallow, err
	}
	if !shallow {
		fmt.Fprintf(log, "the server does not serve a commit by hash: fetched every branch and tag\n")
	}
	if err := finishCheckout(repo.Git, h, srcDir); err != nil {
		return shallow, err
	}
	fmt.Fprintf(log, "checked out %s (shallow=%t)\n", h, shallow)
	return shallow, nil
}

// checkoutRef fetches ref alone at depth 1 into a repository in gitDir and,
// when it brings commit h, checks it out into srcDir and reports true.
// Otherwise it removes what it made.
func checkoutRef(ctx context.Context, repoURL, ref string, h plumbing.Hash, auth api.GitAuth, gitDir, srcDir string) (bool, error) {
	repo, err := gitx.Init(gitDir, srcDir, repoURL, auth)
	if err != nil {
		return false, err
	}
	defer repo.Close()
	err = repo.Fetch(ctx, 1, "+"+ref+":refs/kat/ref")
	if err == nil {
		if _, cerr := repo.Git.CommitObject(h); cerr == nil {
			return true, finishCheckout(repo.Git, h, srcDir)
		}
	}
	return false, errors.Join(err, os.RemoveAll(gitDir), os.RemoveAll(srcDir))
}

// finishCheckout checks the fetched commit out into srcDir.
func finishCheckout(repo *git.Repository, h plumbing.Hash, srcDir string) error {
	wt, err := repo.Worktree()
	if err != nil {
		return fmt.Errorf("open worktree: %w", err)
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: h, Force: true}); err != nil {
		return fmt.Errorf("check out %s: %w", api.ShortCommit(h.String()), err)
	}
	// go-git left a ".git" file pointing at gitDir: keep it out of the
	// build context.
	if err := os.Remove(filepath.Join(srcDir, ".git")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove .git link from the checkout: %w", err)
	}
	return nil
}
