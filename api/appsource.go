package api

import "time"

// AppSource is the leader's record of a workload's app repository
// (workload.kat spec.source.git): the ref it follows and the commit that ref
// resolved to last. It is level-triggered state: a new leader reads it back
// and keeps the commit until the ref moves.
type AppSource struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Repository is the app repository URL, credentials removed.
	Repository string `json:"repository"`
	// Ref is what the workload follows: "branch main", "tag v1" or
	// "commit 0123abc".
	Ref string `json:"ref"`
	// Commit is the full commit hash Ref resolved to last; empty until the
	// first resolution succeeds.
	Commit string `json:"commit,omitempty"`
	// ResolvedAt is the time of the last successful resolution.
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
	// CheckedAt is the time of the last attempt.
	CheckedAt time.Time `json:"checkedAt,omitzero"`
	// LastError says why the last attempt failed; empty after a success.
	LastError string `json:"lastError,omitempty"`
}
