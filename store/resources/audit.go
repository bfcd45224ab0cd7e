package resources

import (
	"context"

	"kat.dws.rip/kat/api"
)

// DefaultAuditKeep is how many audit entries AppendAudit keeps unless told
// otherwise.
const DefaultAuditKeep = 1000

// prefixAudit is the audit log's capped list (docs/architecture.md "etcd keys").
const prefixAudit = "/kat/audit/"

// AuditPrefix is the prefix of every audit entry.
func AuditPrefix() string { return prefixAudit }

// AppendAudit records e (its Time defaults to now) and deletes the oldest
// entries beyond keep (DefaultAuditKeep when keep <= 0).
func (r *Repo) AppendAudit(ctx context.Context, e api.AuditEntry, keep int) error {
	if e.Time.IsZero() {
		e.Time = r.now().UTC()
	}
	if keep <= 0 {
		keep = DefaultAuditKeep
	}
	return r.appendCapped(ctx, prefixAudit, "audit log", e.Time, e, keep)
}

// ListAudit returns every audit entry kept, oldest first.
func (r *Repo) ListAudit(ctx context.Context) ([]api.AuditEntry, error) {
	return listCapped[api.AuditEntry](ctx, r, prefixAudit, "audit log")
}
