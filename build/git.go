package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"kat.dws.rip/kat/build/gitauth"
)

// Auth names the credential files of an app repository, the same shape as
// a config-repo source's auth (both convert to gitauth.Files, which reads
// them). The files are read at every build, so a
// rotated secret is picked up; their content never reaches an error or a
// log. At most one of TokenFile, BasicAuthFile and SSHKeyFile is set.
type Auth struct {
	// TokenFile holds a token (first line) sent as the HTTP basic
	// password with Username (default "x-access-token") as the user.
	TokenFile string
	// Username is the HTTP user sent with TokenFile, or the SSH user
	// (default "git").
	Username string
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string
	// SSHKeyFile is an unencrypted PEM private key for ssh:// and scp-like
	// URLs.
	SSHKeyFile string
	// KnownHostsFile is the known_hosts file SSH host keys are checked
	// against; required with SSHKeyFile.
	KnownHostsFile string
}

// method turns the credential files into a go-git auth method; nil means
// anonymous. Invalid files or fields are an ErrInvalid.
func (a Auth) method() (transport.AuthMethod, error) {
	m, err := gitauth.Method(gitauth.Files(a))
	if errors.Is(err, gitauth.ErrInvalid) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return m, err
}

// RedactURL removes user information (a user name and password or token)
// from a URL, for errors and logs. Other strings are returned unchanged.
func RedactURL(raw string) string { return gitauth.RedactURL(raw) }

var errCommitNotFound = errors.New("commit not found in the repository")

// checkout puts the tree of commit into srcDir, with the repository's
// objects in gitDir (outside srcDir, so .git is not part of the build
// context). It fetches the commit alone with depth 1 when the server allows
// fetching by hash, else every branch and tag in full. shallow tells which.
func checkout(ctx context.Context, repoURL, commit, ref string, auth Auth, gitDir, srcDir string, log io.Writer) (shallow bool, err error) {
	red := gitauth.NewRedactor(repoURL)
	method, err := auth.method()
	if err != nil {
		return false, err
	}
	h := plumbing.NewHash(commit)
	if ref != "" {
		// The ref's head at depth 1, in a repository of its own (a
		// shallow one cannot fetch the history behind it): the commit,
		// unless the ref moved on since it was resolved.
		fmt.Fprintf(log, "fetching %s of %s\n", ref, RedactURL(repoURL))
		found, err := fetchRef(ctx, repoURL, ref, h, method, gitDir+"-ref", srcDir)
		switch {
		case found:
			fmt.Fprintf(log, "checked out %s (shallow=true)\n", commit)
			return true, nil
		case ctx.Err() != nil:
			return false, red.Error(fmt.Errorf("fetch %s from %s: %w (%w)", ref, RedactURL(repoURL), ctx.Err(), err))
		case err != nil:
			fmt.Fprintf(log, "fetch %s: %v\n", ref, red.Error(err))
		default:
			fmt.Fprintf(log, "%s moved on from %s\n", ref, short(commit))
		}
	}
	repo, st, err := initRepo(repoURL, gitDir, srcDir)
	if err != nil {
		return false, red.Error(err)
	}
	defer st.Close()
	fmt.Fprintf(log, "fetching commit %s from %s\n", commit, RedactURL(repoURL))
	err = repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + commit + ":refs/kat/build")},
		Depth:      1, Tags: git.NoTags, Auth: method,
	})
	shallow = err == nil
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		fmt.Fprintf(log, "the server does not serve a commit by hash: fetching every branch and tag\n")
		err = repo.FetchContext(ctx, &git.FetchOptions{
			RemoteName: "origin",
			RefSpecs: []config.RefSpec{
				"+refs/heads/*:refs/remotes/origin/*",
				"+refs/tags/*:refs/tags/*",
			},
			Tags: git.NoTags, Auth: method,
		})
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return shallow, red.Error(fmt.Errorf("fetch %s from %s: %w", short(commit), RedactURL(repoURL), err))
	}
	if _, err := repo.CommitObject(h); err != nil {
		return shallow, red.Error(fmt.Errorf("%s in %s: %w", commit, RedactURL(repoURL), errCommitNotFound))
	}
	if err := finishCheckout(repo, h, srcDir); err != nil {
		return shallow, err
	}
	fmt.Fprintf(log, "checked out %s (shallow=%t)\n", commit, shallow)
	return shallow, nil
}

// initRepo makes an empty repository with its objects in gitDir, its work
// tree srcDir and the remote origin.
func initRepo(repoURL, gitDir, srcDir string) (*git.Repository, *filesystem.Storage, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRUDefault(), filesystem.Options{ExclusiveAccess: true})
	repo, err := git.Init(st, osfs.New(srcDir))
	if err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("init repository: %w", err)
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{repoURL}}); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("add remote: %w", err)
	}
	return repo, st, nil
}

// fetchRef fetches ref alone at depth 1 into a repository in gitDir and, when
// it brings commit h, checks it out into srcDir and reports true. Otherwise
// it removes what it made.
func fetchRef(ctx context.Context, repoURL, ref string, h plumbing.Hash, method transport.AuthMethod, gitDir, srcDir string) (bool, error) {
	repo, st, err := initRepo(repoURL, gitDir, srcDir)
	if err != nil {
		return false, err
	}
	defer st.Close()
	err = repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin", RefSpecs: []config.RefSpec{config.RefSpec("+" + ref + ":refs/kat/ref")},
		Depth: 1, Tags: git.NoTags, Auth: method,
	})
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		if _, cerr := repo.CommitObject(h); cerr == nil {
			return true, finishCheckout(repo, h, srcDir)
		}
		err = nil
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
		return fmt.Errorf("check out %s: %w", short(h.String()), err)
	}
	// go-git left a ".git" file pointing at gitDir: keep it out of the
	// build context.
	if err := os.Remove(filepath.Join(srcDir, ".git")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove .git link from the checkout: %w", err)
	}
	return nil
}
