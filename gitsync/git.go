package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	pathpkg "path"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/quadlet"
)

// errPathMissing is returned by listTree when the source's path is not in
// the commit.
var errPathMissing = errors.New("gitsync: path not in commit")

// errRead marks a failure to read an object of the repository (missing or
// unreadable), as opposed to a problem with what it holds: the commit is
// read again (a repository read in place may be repacked under the reader)
// rather than the directory or file taken for bad.
var errRead = errors.New("read object")

// gitRepo is a bare clone of one branch of a source, without a worktree
// (gitx does the transport), or a file:// source's repository read in place
// (openLocal). It is not safe for concurrent use: one source loop owns it.
// Close releases the pack files it keeps open.
type gitRepo struct {
	*gitx.Repo
	branch string
	// dir is the repository read in place; "" for a clone.
	dir string
}

func (g *gitRepo) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName(gitx.Remote, g.branch)
}

// openRepo opens the clone in dir, or creates it when it is missing, points
// elsewhere or cannot be opened (a corrupted clone is started again).
func openRepo(dir, url, branch string, auth api.GitAuth) (*gitRepo, error) {
	r, err := gitx.Open(dir, url, auth)
	if err != nil {
		return nil, err
	}
	return &gitRepo{Repo: r, branch: branch}, nil
}

// remoteHead asks the remote for the branch head without fetching anything
// (like git ls-remote).
func (g *gitRepo) remoteHead(ctx context.Context) (plumbing.Hash, error) {
	return gitx.Resolve(ctx, g.URL, g.Auth, gitx.Ref{Branch: g.branch})
}

// localHead is the branch head of the last fetch, or the zero hash.
func (g *gitRepo) localHead() plumbing.Hash {
	ref, err := g.Git.Reference(g.remoteRef(), true)
	if err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// fetch brings the branch up to date (force: a rewritten history replaces the
// old one) and returns its head.
func (g *gitRepo) fetch(ctx context.Context) (plumbing.Hash, error) {
	spec := "+" + plumbing.NewBranchReferenceName(g.branch).String() + ":" + g.remoteRef().String()
	if err := g.Fetch(ctx, 0, spec); err != nil {
		return plumbing.ZeroHash, err
	}
	h := g.localHead()
	if h.IsZero() {
		return h, fmt.Errorf("branch %q of %s not found after fetch", g.branch, gitx.RedactURL(g.URL))
	}
	return h, nil
}

// repack packs every object into one pack; go-git writes one pack per fetch
// and never repacks on its own.
func (g *gitRepo) repack() error {
	return g.Git.RepackObjects(&git.RepackConfig{})
}

// listTree lists the workload directories and namespace files of commit
// under root. Trees whose hash equals one in prev (the listing of an
// earlier commit, may be nil) are taken from prev without being read, and a
// changed tree is compared with prev's entry by entry (listChanges, which
// consumes prev).
func (g *gitRepo) listTree(c *object.Commit, root string, prev *Listing) (Listing, error) {
	l, _, err := g.listChanges(c, root, prev)
	return l, err
}

// readDir reads the .kat files of a workload directory from the tree with
// hash, with the same rules and limits as quadlet.ReadDir.
func (g *gitRepo) readDir(hash string) (map[string][]byte, error) {
	t, err := g.Git.TreeObject(plumbing.NewHash(hash))
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w: %w", api.ShortCommit(hash), errRead, err)
	}
	lim := quadlet.DefaultLimits
	files := map[string][]byte{}
	for _, e := range t.Entries {
		name := e.Name
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		switch {
		case e.Mode == filemode.Dir:
			return nil, fmt.Errorf("%s: is a directory; a workload directory holds only .kat files", name)
		case e.Mode == filemode.Symlink:
			return nil, fmt.Errorf("%s: is a symbolic link; links are not followed", name)
		case !e.Mode.IsFile():
			return nil, fmt.Errorf("%s: is not a regular file", name)
		case pathpkg.Ext(name) != ".kat":
			return nil, fmt.Errorf("%s: %s", name, quadlet.FileNameProblem(name))
		}
		if len(files) == lim.MaxFiles {
			return nil, fmt.Errorf("more than %d .kat files: %w", lim.MaxFiles, quadlet.ErrTooLarge)
		}
		data, err := g.readBlob(e.Hash, lim.MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		files[name] = data
	}
	if err := lim.Check(files); err != nil {
		return nil, err
	}
	return files, nil
}

// readBlob reads a blob of at most limit bytes.
func (g *gitRepo) readBlob(h plumbing.Hash, limit int64) ([]byte, error) {
	b, err := g.Git.BlobObject(h)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w: %w", api.ShortCommit(h.String()), errRead, err)
	}
	if b.Size > limit {
		return nil, fmt.Errorf("%d bytes, more than the limit of %d: %w", b.Size, limit, quadlet.ErrTooLarge)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w: %w", api.ShortCommit(h.String()), errRead, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w: %w", api.ShortCommit(h.String()), errRead, err)
	}
	return data, nil
}
