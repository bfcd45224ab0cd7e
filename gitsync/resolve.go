package gitsync

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

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// ErrRefNotFound means the branch, tag or short commit a workload follows is
// not on the app repository's remote.
var ErrRefNotFound = errors.New("gitsync: ref not found")

var fullCommitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// RefString describes what g follows, for records and messages: "branch
// main", "tag v1", "commit 0123abc" or "default branch".
func RefString(g quadlet.GitSource) string {
	switch {
	case g.Commit != "":
		return "commit " + strings.ToLower(g.Commit)
	case g.Tag != "":
		return "tag " + g.Tag
	case g.Branch != "":
		return "branch " + g.Branch
	}
	return "default branch"
}

// ResolveRef resolves what an app repository reference (workload.kat
// spec.source.git) follows to one full commit hash, asking the remote for its
// refs without fetching anything (like git ls-remote), with the same auth as
// sources. A full commit hash is returned as it is; a short one must be the
// prefix of a branch or tag head. Errors never hold credentials.
func ResolveRef(ctx context.Context, g quadlet.GitSource, auth resources.SourceAuth) (string, error) {
	if c := strings.ToLower(g.Commit); fullCommitRE.MatchString(c) {
		return c, nil
	}
	am, err := authFor(auth)
	if err != nil {
		return "", err
	}
	rem := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{g.Repository}})
	refs, err := rem.ListContext(ctx, &git.ListOptions{Auth: am, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", fmt.Errorf("list refs of %s: %s", RedactURL(g.Repository), redactMessage(err.Error(), g.Repository))
	}
	byName := make(map[plumbing.ReferenceName]*plumbing.Reference, len(refs))
	for _, r := range refs {
		byName[r.Name()] = r
	}
	commit, err := pickRef(byName, g)
	if err != nil {
		return "", fmt.Errorf("resolve %s of %s: %w", RefString(g), RedactURL(g.Repository), err)
	}
	return commit, nil
}

// pickRef chooses the commit g names among the advertised refs. It is pure.
func pickRef(refs map[plumbing.ReferenceName]*plumbing.Reference, g quadlet.GitSource) (string, error) {
	hashOf := func(name plumbing.ReferenceName) (string, bool) {
		for range 5 { // follow symbolic refs, a few levels at most
			r, ok := refs[name]
			if !ok {
				return "", false
			}
			if r.Type() == plumbing.HashReference {
				return r.Hash().String(), true
			}
			name = r.Target()
		}
		return "", false
	}
	switch {
	case g.Commit != "":
		short := strings.ToLower(g.Commit)
		var found string
		for _, r := range refs {
			if r.Type() == plumbing.HashReference && strings.HasPrefix(r.Hash().String(), short) {
				if found != "" && found != r.Hash().String() {
					return "", fmt.Errorf("%w: short commit %s is ambiguous; give all 40 digits", ErrRefNotFound, short)
				}
				found = r.Hash().String()
			}
		}
		if found == "" {
			return "", fmt.Errorf("%w: no branch or tag points at %s; give all 40 digits of the commit", ErrRefNotFound, short)
		}
		return found, nil
	case g.Tag != "":
		if h, ok := hashOf(plumbing.ReferenceName("refs/tags/" + g.Tag + "^{}")); ok {
			return h, nil // an annotated tag, peeled to its commit
		}
		if h, ok := hashOf(plumbing.NewTagReferenceName(g.Tag)); ok {
			return h, nil
		}
		return "", fmt.Errorf("%w: tag %q", ErrRefNotFound, g.Tag)
	case g.Branch != "":
		if h, ok := hashOf(plumbing.NewBranchReferenceName(g.Branch)); ok {
			return h, nil
		}
		return "", fmt.Errorf("%w: branch %q", ErrRefNotFound, g.Branch)
	}
	if h, ok := hashOf(plumbing.HEAD); ok {
		return h, nil
	}
	return "", fmt.Errorf("%w: the remote advertises no HEAD", ErrRefNotFound)
}
