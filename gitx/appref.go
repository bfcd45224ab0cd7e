package gitx

import (
	"context"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// AppRef is what an app repository reference (workload.kat
// spec.source.git) follows, in this package's terms; its String describes
// it for records and messages ("branch main", "tag v1", "commit 0123abc" or
// "default branch").
func AppRef(g quadlet.GitSource) Ref {
	return Ref{Branch: g.Branch, Tag: g.Tag, Commit: g.Commit}
}

// ResolveAppRef resolves what an app repository reference follows to one
// full commit hash, asking the remote for its refs without fetching anything
// ([Resolve], like git ls-remote): the leader's app sources call it for every
// workload built from Git. A full commit hash is returned as it is; a short
// one must be the prefix of a branch or tag head. A ref the remote lacks is
// an [ErrRefNotFound]. Errors never hold credentials.
func ResolveAppRef(ctx context.Context, g quadlet.GitSource, auth api.GitAuth) (string, error) {
	h, err := Resolve(ctx, g.Repository, auth, AppRef(g))
	if err != nil {
		return "", err
	}
	return h.String(), nil
}
