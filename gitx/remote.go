package gitx

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"kat.dws.rip/kat/api"
)

// ErrRefNotFound means the branch, tag or short commit a Ref names is not
// among a remote's refs.
var ErrRefNotFound = errors.New("gitx: ref not found")

// Ref names a commit of a remote: at most one of its fields is set (when
// several are, Commit wins over Tag, and Tag over Branch). The zero Ref is
// the remote's default branch, the one its HEAD points at.
type Ref struct {
	// Branch is a branch name, such as "main".
	Branch string
	// Tag is a tag name, such as "v1.2.0"; an annotated tag is peeled to
	// its commit.
	Tag string
	// Commit is a full commit hash (40 hex digits), or a prefix of at
	// least 4 that must be the head of a branch or tag.
	Commit string
}

// String describes r for records and messages: "branch main", "tag v1",
// "commit 0123abc" or "default branch".
func (r Ref) String() string {
	switch {
	case r.Commit != "":
		return "commit " + strings.ToLower(r.Commit)
	case r.Tag != "":
		return "tag " + r.Tag
	case r.Branch != "":
		return "branch " + r.Branch
	}
	return "default branch"
}

var (
	fullCommitRE  = regexp.MustCompile(`^[0-9a-f]{40}$`)
	shortCommitRE = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
)

// ListRefs asks the remote at rawURL for its refs without fetching anything
// (like git ls-remote), with annotated tags peeled: a tag refs/tags/v1 that
// points at a tag object comes with refs/tags/v1^{} pointing at its commit.
// The credential files are read for this call.
func ListRefs(ctx context.Context, rawURL string, auth api.GitAuth) ([]*plumbing.Reference, error) {
	doing := "list refs of " + RedactURL(rawURL)
	method, err := AuthMethod(rawURL, auth)
	if err != nil {
		return nil, fail(ctx, rawURL, doing, err)
	}
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{rawURL}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: method, PeelingOption: git.AppendPeeled})
	if err != nil {
		return nil, fail(ctx, rawURL, doing, err)
	}
	return refs, nil
}

// Resolve returns the commit ref names on the remote at rawURL, asking the
// remote for its refs without fetching anything. A full commit hash is
// returned as it is, without asking; a short one must be the prefix of a
// branch or tag head. A ref the remote does not have is an ErrRefNotFound,
// a malformed one an ErrInvalid.
func Resolve(ctx context.Context, rawURL string, auth api.GitAuth, ref Ref) (plumbing.Hash, error) {
	c := strings.ToLower(ref.Commit)
	switch {
	case fullCommitRE.MatchString(c):
		return plumbing.NewHash(c), nil
	case c != "" && !shortCommitRE.MatchString(c):
		return plumbing.ZeroHash, invalid("resolve %s of %s: commit %q is not 4 to 40 hex digits", ref, RedactURL(rawURL), ref.Commit)
	}
	refs, err := ListRefs(ctx, rawURL, auth)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	h, err := pickRef(refs, ref)
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("resolve %s of %s: %w", ref, RedactURL(rawURL), err)
	}
	return h, nil
}

// pickRef chooses the commit ref names among a remote's refs. It is pure.
func pickRef(list []*plumbing.Reference, ref Ref) (plumbing.Hash, error) {
	refs := make(map[plumbing.ReferenceName]*plumbing.Reference, len(list))
	for _, r := range list {
		refs[r.Name()] = r
	}
	hashOf := func(name plumbing.ReferenceName) (plumbing.Hash, bool) {
		for range 5 { // follow symbolic refs, a few levels at most
			r, ok := refs[name]
			if !ok {
				return plumbing.ZeroHash, false
			}
			if r.Type() == plumbing.HashReference {
				return r.Hash(), true
			}
			name = r.Target()
		}
		return plumbing.ZeroHash, false
	}
	switch {
	case ref.Commit != "":
		short := strings.ToLower(ref.Commit)
		var found plumbing.Hash
		for _, r := range list {
			if r.Type() != plumbing.HashReference || !strings.HasPrefix(r.Hash().String(), short) {
				continue
			}
			if !found.IsZero() && found != r.Hash() {
				return plumbing.ZeroHash, fmt.Errorf("%w: short commit %s is ambiguous; give all 40 digits", ErrRefNotFound, short)
			}
			found = r.Hash()
		}
		if found.IsZero() {
			return plumbing.ZeroHash, fmt.Errorf("%w: no branch or tag points at %s; give all 40 digits of the commit", ErrRefNotFound, short)
		}
		return found, nil
	case ref.Tag != "":
		if h, ok := hashOf(plumbing.ReferenceName("refs/tags/" + ref.Tag + "^{}")); ok {
			return h, nil // an annotated tag, peeled to its commit
		}
		if h, ok := hashOf(plumbing.NewTagReferenceName(ref.Tag)); ok {
			return h, nil
		}
		return plumbing.ZeroHash, fmt.Errorf("%w: tag %q", ErrRefNotFound, ref.Tag)
	case ref.Branch != "":
		if h, ok := hashOf(plumbing.NewBranchReferenceName(ref.Branch)); ok {
			return h, nil
		}
		return plumbing.ZeroHash, fmt.Errorf("%w: branch %q", ErrRefNotFound, ref.Branch)
	}
	if h, ok := hashOf(plumbing.HEAD); ok {
		return h, nil
	}
	return plumbing.ZeroHash, fmt.Errorf("%w: the remote advertises no HEAD", ErrRefNotFound)
}
