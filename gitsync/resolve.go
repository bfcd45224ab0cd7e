package gitsync

import (
	"context"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/quadlet"
)

// gitRef is what an app repository reference follows, in gitx's terms.
func gitRef(g quadlet.GitSource) gitx.Ref {
	return gitx.Ref{Branch: g.Branch, Tag: g.Tag, Commit: g.Commit}
}

// RefString describes what g follows, for records and messages: "branch
// main", "tag v1", "commit 0123abc" or "default branch".
func RefString(g quadlet.GitSource) string { return gitRef(g).String() }

// ResolveRef resolves what an app repository reference (workload.kat
// spec.source.git) follows to one full commit hash, asking the remote for its
// refs without fetching anything (gitx.Resolve, like git ls-remote). A full
// commit hash is returned as it is; a short one must be the prefix of a
// branch or tag head. A ref the remote lacks is a gitx.ErrRefNotFound.
// Errors never hold credentials.
func ResolveRef(ctx context.Context, g quadlet.GitSource, auth api.GitAuth) (string, error) {
	h, err := gitx.Resolve(ctx, g.Repository, auth, gitRef(g))
	if err != nil {
		return "", err
	}
	return h.String(), nil
}
