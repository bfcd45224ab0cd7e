package gitx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/klauspost/compress/zlib"

	"kat.dws.rip/kat/api"
)

// ErrCommitNotFound means a commit is not in a repository after a fetch that
// should have brought it: the remote does not have it.
var ErrCommitNotFound = errors.New("gitx: commit not found")

// Remote is the name of the one remote of a Repo.
const Remote = "origin"

// A Repo is a local repository in a filesystem storage, bare or with a work
// tree, whose one remote, origin, is URL, fetched with Auth. It is not safe
// for concurrent use: one goroutine owns it. Close releases the pack files
// it keeps open.
type Repo struct {
	// Git is the go-git repository, for reading objects and refs and for
	// checking out.
	Git *git.Repository
	// URL is origin's URL.
	URL string
	// Auth names the credential files of URL, read at every fetch.
	Auth api.GitAuth

	gitDir, workTree string
	st               *filesystem.Storage
	// inPlace: a repository of someone else's opened by OpenInPlace,
	// never written or reset.
	inPlace bool
}

// Object cache of a repository's storage. go-git's default, 96 MiB per
// repository, would let every config repository and build clone keep that
// much of what it read (more in Go's overhead: the cache counts object
// sizes only), although a sync or a checkout reads most objects once. The
// cache is for delta bases and the trees walked again; an object larger than
// largeObject is read without it.
const (
	objectCacheBytes = 4 * cache.MiByte
	largeObject      = 256 << 10
)

// storage opens the objects in dir for one owner: pack files stay open
// between reads until Close.
func storage(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(objectCacheBytes),
		filesystem.Options{ExclusiveAccess: true, KeepDescriptors: true, LargeObjectThreshold: largeObject})
}

// Open opens the bare repository in dir as it is when its origin is
// rawURL, and otherwise (missing, another URL, unreadable) deletes dir and
// makes a new, empty one: a damaged clone is started again.
func Open(dir, rawURL string, auth api.GitAuth) (*Repo, error) {
	st := storage(dir)
	if g, err := git.Open(st, nil); err == nil {
		rem, rerr := g.Remote(Remote)
		if rerr == nil && len(rem.Config().URLs) == 1 && rem.Config().URLs[0] == rawURL {
			return &Repo{Git: g, URL: rawURL, Auth: auth, gitDir: dir, st: st}, nil
		}
	}
	_ = st.Close()
	r := &Repo{URL: rawURL, Auth: auth, gitDir: dir}
	if err := r.Reset(); err != nil {
		return nil, err
	}
	return r, nil
}

// Init makes a new, empty repository with its objects in gitDir and origin
// rawURL. workTree is where a checkout goes, outside gitDir (go-git leaves a
// ".git" file there pointing at gitDir); "" makes a bare repository.
// Directories are created as needed; what they hold is kept.
func Init(gitDir, workTree, rawURL string, auth api.GitAuth) (*Repo, error) {
	r := &Repo{URL: rawURL, Auth: auth, gitDir: gitDir, workTree: workTree}
	if err := r.init(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Repo) init() error {
	st := storage(r.gitDir)
	var wt billy.Filesystem
	if r.workTree != "" {
		wt = osfs.New(r.workTree)
	}
	g, err := git.Init(st, wt)
	if err == nil {
		_, err = g.CreateRemote(&config.RemoteConfig{Name: Remote, URLs: []string{r.URL}})
	}
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("init repository %s for %s: %w", r.gitDir, RedactURL(r.URL), err)
	}
	r.Git, r.st = g, st
	return nil
}

// OpenInPlace opens the repository whose Git directory is gitDir, on this
// machine, where it is and for reading only, as git clone --local shares a
// local repository's objects rather than copying them: reading a commit then
// costs neither git-upload-pack's pack nor its parsing. Other processes may
// write to it meanwhile (it is opened without exclusive access; Refresh
// makes the packs they add visible). The object cache holds cacheBytes;
// objects above largeObject bytes bypass it. rawURL is how the repository
// was named, for messages. Reset refuses such a repository.
func OpenInPlace(gitDir, rawURL string, cacheBytes cache.FileSize, largeObject int64) (*Repo, error) {
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRU(cacheBytes),
		filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: largeObject})
	g, err := git.Open(st, nil)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("open repository %s in place: %w", gitDir, err)
	}
	return &Repo{Git: g, URL: rawURL, gitDir: gitDir, st: st, inPlace: true}, nil
}

// Refresh makes a repository opened in place see the packs added since it
// listed them (a push of many objects, a git gc), and closes the files of
// those removed.
func (r *Repo) Refresh() {
	if r.st == nil {
		return
	}
	_ = r.st.Close() // the storage opens what it needs again
	r.st.Reindex()
}

// Reset deletes the repository's objects and refs (not the work tree) and
// makes it new and empty, for a clone to start again.
func (r *Repo) Reset() error {
	if r.inPlace {
		return fmt.Errorf("reset %s: a repository opened in place is never written", r.gitDir)
	}
	_ = r.Close()
	if err := os.RemoveAll(r.gitDir); err != nil {
		return fmt.Errorf("remove repository %s: %w", r.gitDir, err)
	}
	if err := os.MkdirAll(r.gitDir, 0o700); err != nil {
		return fmt.Errorf("create repository directory: %w", err)
	}
	return r.init()
}

// Close releases the files the repository keeps open. The Repo is unusable
// afterwards, until Reset.
func (r *Repo) Close() error {
	if r.st == nil {
		return nil
	}
	err := r.st.Close()
	r.st, r.Git = nil, nil
	return err
}

// Fetch fetches refspecs (such as "+refs/heads/main:refs/remotes/origin/main")
// from origin, forced and without tags beyond those the refspecs name, with
// at most depth commits of history (0: all of it). Being up to date already
// is no error.
func (r *Repo) Fetch(ctx context.Context, depth int, refspecs ...string) error {
	doing := fmt.Sprintf("fetch %s from %s", refspecs, RedactURL(r.URL))
	if len(refspecs) == 1 {
		doing = fmt.Sprintf("fetch %s from %s", refspecs[0], RedactURL(r.URL))
	}
	method, err := AuthMethod(r.URL, r.Auth)
	if err != nil {
		return fail(ctx, r.URL, doing, err)
	}
	specs := make([]config.RefSpec, len(refspecs))
	for i, s := range refspecs {
		specs[i] = config.RefSpec(s)
		if err := specs[i].Validate(); err != nil {
			return invalid("%s: %w", doing, err)
		}
	}
	err = r.Git.FetchContext(ctx, &git.FetchOptions{
		RemoteName: Remote, RefSpecs: specs, Depth: depth, Tags: git.NoTags, Force: true, Auth: method,
	})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return fail(ctx, r.URL, doing, err)
	}
	return nil
}

// FetchCommit fetches commit h from origin: alone at depth 1 when the server
// serves commits by hash (uploadpack.allowReachableSHA1InWant or
// allowTipSHA1InWant, as GitHub does), else every branch and tag in full,
// since a shallow fetch of a branch may stop short of h. shallow tells
// which. A commit still missing afterwards is an ErrCommitNotFound.
func (r *Repo) FetchCommit(ctx context.Context, h plumbing.Hash) (shallow bool, err error) {
	err = r.Fetch(ctx, 1, "+"+h.String()+":refs/kat/commit")
	shallow = err == nil
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		err = r.Fetch(ctx, 0, "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
	}
	if err != nil {
		return false, err
	}
	if _, err := r.Git.CommitObject(h); err != nil {
		return shallow, fmt.Errorf("commit %s in %s: %w", h, RedactURL(r.URL), ErrCommitNotFound)
	}
	return shallow, nil
}

// ReadObject returns the content of object h of type t. A loose object (what
// a small push writes) is read straight from its file, inflated by
// klauspost/compress (about 1.4 times as fast as compress/zlib) and not hashed
// again (go-git's reader hashes what it reads with collision detection):
// reading the changed tree of a directory of 10,000 workloads, a 330 KB
// object, then costs about half as much. A packed object is read through
// go-git.
func (r *Repo) ReadObject(t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	if r.gitDir != "" {
		hs := h.String()
		b, err := readLoose(filepath.Join(r.gitDir, "objects", hs[:2], hs[2:]), t)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				return nil, fmt.Errorf("read object %s: %w", hs, err)
			}
			return b, nil
		}
	}
	o, err := r.Git.Storer.EncodedObject(t, h)
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	rd, err := o.Reader()
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	defer rd.Close()
	b := make([]byte, o.Size())
	if _, err := io.ReadFull(rd, b); err != nil {
		return nil, fmt.Errorf("read object %s: %w", h, err)
	}
	return b, nil
}

// maxLooseObject bounds the size a loose object's header may claim.
const maxLooseObject = 1 << 30

// readLoose reads the loose object file path: zlib("TYPE SIZE\x00" +
// content). It returns an error matching fs.ErrNotExist when there is no
// such file.
func readLoose(path string, want plumbing.ObjectType) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := zlib.NewReader(bufio.NewReaderSize(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("inflate %s: %w", path, err)
	}
	defer zr.Close()
	br := bufio.NewReader(zr)
	header, err := br.ReadString(0)
	if err != nil {
		return nil, fmt.Errorf("read the header of %s: %w", path, err)
	}
	kind, size, ok := strings.Cut(strings.TrimSuffix(header, "\x00"), " ")
	n, err := strconv.ParseInt(size, 10, 64)
	if !ok || err != nil || n < 0 || n > maxLooseObject {
		return nil, fmt.Errorf("%s: malformed header %q", path, header)
	}
	if got, err := plumbing.ParseObjectType(kind); err != nil || got != want {
		return nil, fmt.Errorf("%s: a %s object, want a %s: %w", path, kind, want, plumbing.ErrObjectNotFound)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
