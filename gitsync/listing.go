package gitsync

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// errBadTree is returned for a tree object that does not parse.
var errBadTree = errors.New("gitsync: malformed tree object")

// treeEntry is one entry of a raw Git tree object, its name a view into the
// object's bytes.
type treeEntry struct {
	mode filemode.FileMode
	name []byte
	hash plumbing.Hash
}

func (e treeEntry) isDir() bool { return e.mode == filemode.Dir }

// nextEntry parses the first entry of a raw tree ("<octal mode> <name>\0"
// and a 20-byte hash) and returns the rest.
func nextEntry(raw []byte) (treeEntry, []byte, error) {
	sp := bytes.IndexByte(raw, ' ')
	if sp <= 0 {
		return treeEntry{}, nil, errBadTree
	}
	var mode uint32
	for _, c := range raw[:sp] {
		if c < '0' || c > '7' {
			return treeEntry{}, nil, errBadTree
		}
		mode = mode<<3 | uint32(c-'0')
	}
	nul := bytes.IndexByte(raw[sp+1:], 0)
	if nul <= 0 || sp+1+nul+1+20 > len(raw) {
		return treeEntry{}, nil, errBadTree
	}
	nameEnd := sp + 1 + nul
	e := treeEntry{mode: filemode.FileMode(mode), name: raw[sp+1 : nameEnd]}
	copy(e.hash[:], raw[nameEnd+1:nameEnd+21])
	return e, raw[nameEnd+21:], nil
}

// entries parses every entry of a raw tree.
func entries(raw []byte, each func(treeEntry)) error {
	for len(raw) > 0 {
		e, rest, err := nextEntry(raw)
		if err != nil {
			return err
		}
		each(e)
		raw = rest
	}
	return nil
}

// compareEntries orders tree entries as Git does: by name, a directory's
// name as if it ended in "/".
func compareEntries(a, b treeEntry) int {
	n := min(len(a.name), len(b.name))
	if c := bytes.Compare(a.name[:n], b.name[:n]); c != 0 {
		return c
	}
	next := func(e treeEntry) byte {
		switch {
		case len(e.name) > n:
			return e.name[n]
		case e.isDir():
			return '/'
		}
		return 0
	}
	ca, cb := next(a), next(b)
	switch {
	case ca < cb:
		return -1
	case ca > cb:
		return 1
	}
	return 0
}

// treeDiff is what diffEntries found.
type treeDiff struct {
	// removed are the entries of old that new no longer has; added those of
	// new that old did not have or had with another hash.
	removed, added []treeEntry
	// workload is set when new holds a workload.kat file.
	workload bool
}

// diffEntries compares two raw trees (old may be nil), both sorted as Git
// sorts them, in one pass: entries equal in both are skipped without
// allocating.
func diffEntries(old, new []byte) (treeDiff, error) {
	var d treeDiff
	var o, n treeEntry
	var err error
	oOK, nOK := false, false
	for {
		if !oOK && len(old) > 0 {
			if o, old, err = nextEntry(old); err != nil {
				return treeDiff{}, err
			}
			oOK = true
		}
		if !nOK && len(new) > 0 {
			if n, new, err = nextEntry(new); err != nil {
				return treeDiff{}, err
			}
			nOK = true
			d.workload = d.workload || (string(n.name) == quadlet.WorkloadFile && n.mode.IsFile())
		}
		switch {
		case !oOK && !nOK:
			return d, nil
		case !nOK || (oOK && compareEntries(o, n) < 0):
			d.removed = append(d.removed, o)
			oOK = false
		case !oOK || compareEntries(o, n) > 0:
			d.added = append(d.added, n)
			nOK = false
		default:
			if o.hash != n.hash || o.mode != n.mode {
				d.added = append(d.added, n)
			}
			oOK, nOK = false, false
		}
	}
}

// rawTree reads the content of tree object h.
func (g *gitRepo) rawTree(h plumbing.Hash) ([]byte, error) {
	return g.ReadObject(plumbing.TreeObject, h)
}

// listingDiff is what changed between two listings: the workload
// directories, namespace files and secret files added or changed, and the
// workload directories gone, each sorted.
type listingDiff struct {
	dirs, namespaces, secrets, removed []string
}

// listChanges lists commit c under root as listTree does, and returns what
// changed from prev (everything when prev is nil). It consumes prev: prev's
// maps become the new listing's, so prev must not be used afterwards.
func (g *gitRepo) listChanges(c *object.Commit, root string, prev *Listing) (Listing, listingDiff, error) {
	l := newListing(prev)
	t, err := c.Tree()
	if err != nil {
		return l, listingDiff{}, fmt.Errorf("read tree of %s: %w", api.ShortCommit(c.Hash.String()), err)
	}
	if root != "." {
		if t, err = t.Tree(root); err != nil {
			if errors.Is(err, object.ErrDirectoryNotFound) {
				return l, listingDiff{}, fmt.Errorf("%w: %q does not exist at commit %s", errPathMissing, root, api.ShortCommit(c.Hash.String()))
			}
			return l, listingDiff{}, fmt.Errorf("read %s at %s: %w", root, api.ShortCommit(c.Hash.String()), err)
		}
	}
	ls := &lister{g: g, l: &l, dirs: map[string]bool{}, namespaces: map[string]bool{}, secrets: map[string]bool{}, removed: map[string]bool{}}
	if err := ls.list(root, t.Hash); err != nil {
		return l, listingDiff{}, err
	}
	var d listingDiff
	for p := range ls.dirs {
		if _, ok := l.Dirs[p]; ok {
			d.dirs = append(d.dirs, p)
		}
	}
	for p := range ls.namespaces {
		if _, ok := l.Namespaces[p]; ok {
			d.namespaces = append(d.namespaces, p)
		}
	}
	for p := range ls.secrets {
		if _, ok := l.Secrets[p]; ok {
			d.secrets = append(d.secrets, p)
		}
	}
	for p := range ls.removed {
		if _, ok := l.Dirs[p]; !ok {
			d.removed = append(d.removed, p)
		}
	}
	slices.Sort(d.dirs)
	slices.Sort(d.namespaces)
	slices.Sort(d.secrets)
	slices.Sort(d.removed)
	return l, d, nil
}

// lister builds the listing of one commit from the listing of an earlier one:
// a tree whose hash is unchanged is not read, and a changed tree is compared
// with its earlier content entry by entry, so a commit costs work on the
// trees it changed, not on the whole repository. It records the workload
// directories, namespace files and secret files it set and the directories
// it removed.
type lister struct {
	g                                  *gitRepo
	l                                  *Listing
	dirs, namespaces, secrets, removed map[string]bool
}

// removeDir takes workload directory p out of the listing.
func (ls *lister) removeDir(p string) {
	if _, ok := ls.l.Dirs[p]; ok {
		delete(ls.l.Dirs, p)
		ls.removed[p] = true
	}
}

// newListing returns the listing to bring to a new commit: prev itself (its
// maps are changed in place, a copy of 10,000 entries a commit would cost
// more than the commit), or an empty one when prev is nil.
func newListing(prev *Listing) Listing {
	if prev == nil {
		return Listing{Dirs: map[string]string{}, Namespaces: map[string]string{}, Secrets: map[string]string{}, Trees: map[string]string{}, raw: map[string][]byte{}}
	}
	if prev.Secrets == nil {
		prev.Secrets = map[string]string{}
	}
	return *prev
}

func joinPath(dir string, name []byte) string {
	if dir == "." {
		return string(name)
	}
	return dir + "/" + string(name)
}

// list brings the listing at and below dir to tree h: a directory holding
// workload.kat is a workload (not descended into), any other is walked for
// workload directories, namespace.kat files and secret files (*.sops.yaml);
// names starting with "." are skipped.
func (ls *lister) list(dir string, h plumbing.Hash) error {
	hs := h.String()
	if ls.l.Dirs[dir] == hs || ls.l.Trees[dir] == hs {
		return nil // unchanged: the listing holds it already
	}
	raw, err := ls.g.rawTree(h)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", dir, err)
	}
	d, err := diffEntries(ls.l.raw[dir], raw)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", dir, err)
	}
	if d.workload {
		if err := ls.remove(dir); err != nil {
			return err
		}
		ls.l.Dirs[dir] = hs
		ls.dirs[dir] = true
		return nil
	}
	ls.removeDir(dir)
	ls.l.Trees[dir], ls.l.raw[dir] = hs, raw
	for _, e := range d.removed {
		if bytes.HasPrefix(e.name, []byte(".")) {
			continue
		}
		p := joinPath(dir, e.name)
		switch {
		case e.isDir():
			if err := ls.remove(p); err != nil {
				return err
			}
		case string(e.name) == quadlet.NamespaceFile:
			delete(ls.l.Namespaces, p)
		case quadlet.IsSecretFile(string(e.name)):
			delete(ls.l.Secrets, p)
		}
	}
	for _, e := range d.added {
		if bytes.HasPrefix(e.name, []byte(".")) {
			continue
		}
		p := joinPath(dir, e.name)
		switch {
		case e.isDir():
			if err := ls.list(p, e.hash); err != nil {
				return err
			}
		case string(e.name) == quadlet.NamespaceFile && e.mode.IsFile():
			ls.l.Namespaces[p] = e.hash.String()
			ls.namespaces[p] = true
		case quadlet.IsSecretFile(string(e.name)) && e.mode.IsFile():
			ls.l.Secrets[p] = e.hash.String()
			ls.secrets[p] = true
		}
	}
	return nil
}

// remove takes dir and everything the listing holds below it out of the
// listing.
func (ls *lister) remove(dir string) error {
	ls.removeDir(dir)
	raw, ok := ls.l.raw[dir]
	if !ok {
		return nil
	}
	delete(ls.l.raw, dir)
	delete(ls.l.Trees, dir)
	return entries(raw, func(e treeEntry) {
		p := joinPath(dir, e.name)
		switch {
		case bytes.HasPrefix(e.name, []byte(".")):
		case e.isDir():
			_ = ls.remove(p) // its raw content parsed when it was listed
		case string(e.name) == quadlet.NamespaceFile:
			delete(ls.l.Namespaces, p)
		case quadlet.IsSecretFile(string(e.name)):
			delete(ls.l.Secrets, p)
		}
	})
}
