package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"kat.dws.rip/kat/quadlet"
)

// errPathMissing is returned by listTree when the source's path is not in
// the commit.
var errPathMissing = errors.New("gitsync: path not in commit")

// gitRepo is a bare clone of one branch of a source, without a worktree. It
// is not safe for concurrent use: one source loop owns it. Close releases
// the pack files it keeps open.
type gitRepo struct {
	dir    string
	url    string
	branch string
	st     *filesystem.Storage
	repo   *git.Repository
}

func (g *gitRepo) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", g.branch)
}

// storage opens dir with pack files kept open between reads: the clone is
// only ever used by its source's loop.
func storage(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(),
		filesystem.Options{ExclusiveAccess: true, KeepDescriptors: true})
}

// openRepo opens the clone in dir, or creates it when it is missing, points
// elsewhere or cannot be opened (a corrupted clone is started again).
func openRepo(dir, url, branch string) (*gitRepo, error) {
	g := &gitRepo{dir: dir, url: url, branch: branch}
	st := storage(dir)
	if r, err := git.Open(st, nil); err == nil {
		rem, rerr := r.Remote("origin")
		if rerr == nil && len(rem.Config().URLs) == 1 && rem.Config().URLs[0] == url {
			g.st, g.repo = st, r
			return g, nil
		}
	}
	_ = st.Close()
	if err := g.reinit(); err != nil {
		return nil, err
	}
	return g, nil
}

// reinit deletes the clone and creates an empty bare repository with origin.
func (g *gitRepo) reinit() error {
	g.close()
	if err := os.RemoveAll(g.dir); err != nil {
		return fmt.Errorf("remove clone %s: %w", g.dir, err)
	}
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return fmt.Errorf("create clone directory: %w", err)
	}
	st := storage(g.dir)
	r, err := git.Init(st, nil)
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("init clone %s: %w", g.dir, err)
	}
	if _, err := r.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{g.url}}); err != nil {
		_ = st.Close()
		return fmt.Errorf("init clone %s: %w", g.dir, err)
	}
	g.st, g.repo = st, r
	return nil
}

// close releases the clone's open files.
func (g *gitRepo) close() {
	if g.st != nil {
		_ = g.st.Close()
		g.st, g.repo = nil, nil
	}
}

// remoteHead asks the remote for the branch head without fetching anything
// (like git ls-remote).
func (g *gitRepo) remoteHead(ctx context.Context, auth transport.AuthMethod) (plumbing.Hash, error) {
	rem, err := g.repo.Remote("origin")
	if err != nil {
		return plumbing.ZeroHash, err
	}
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: auth})
	if err != nil {
		return plumbing.ZeroHash, err
	}
	want := plumbing.NewBranchReferenceName(g.branch)
	for _, r := range refs {
		if r.Name() == want {
			return r.Hash(), nil
		}
	}
	return plumbing.ZeroHash, fmt.Errorf("branch %q not found on the remote", g.branch)
}

// localHead is the branch head of the last fetch, or the zero hash.
func (g *gitRepo) localHead() plumbing.Hash {
	ref, err := g.repo.Reference(g.remoteRef(), true)
	if err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// fetch brings the branch up to date (force: a rewritten history replaces the
// old one) and returns its head.
func (g *gitRepo) fetch(ctx context.Context, auth transport.AuthMethod) (plumbing.Hash, error) {
	spec := config.RefSpec("+" + plumbing.NewBranchReferenceName(g.branch).String() + ":" + g.remoteRef().String())
	err := g.repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin", RefSpecs: []config.RefSpec{spec}, Tags: git.NoTags, Force: true, Auth: auth,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return plumbing.ZeroHash, err
	}
	h := g.localHead()
	if h.IsZero() {
		return h, fmt.Errorf("branch %q not found after fetch", g.branch)
	}
	return h, nil
}

// repack packs every object into one pack; go-git writes one pack per fetch
// and never repacks on its own.
func (g *gitRepo) repack() error {
	return g.repo.RepackObjects(&git.RepackConfig{})
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
	t, err := g.repo.TreeObject(plumbing.NewHash(hash))
	if err != nil {
		return nil, fmt.Errorf("read tree: %w", err)
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
			return nil, fmt.Errorf("%s: is not a .kat file; a workload directory holds only .kat files", name)
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
	b, err := g.repo.BlobObject(h)
	if err != nil {
		return nil, fmt.Errorf("read blob: %w", err)
	}
	if b.Size > limit {
		return nil, fmt.Errorf("%d bytes, more than the limit of %d: %w", b.Size, limit, quadlet.ErrTooLarge)
	}
	r, err := b.Reader()
	if err != nil {
		return nil, fmt.Errorf("read blob: %w", err)
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, limit+1))
}
