package resources

import (
	"context"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// SetSuspended suspends or resumes Git management of a Git-owned workload and
// returns its metadata. A workload the API owns is a conflict: there is no Git
// management to suspend. Resuming only clears the flag; the owning source
// applies Git's version again on its next sync.
func (r *Repo) SetSuspended(ctx context.Context, ns, name string, suspended bool) (*api.WorkloadMeta, error) {
	for range maxTxnAttempts {
		var cur api.WorkloadMeta
		ver, err := r.getJSON(ctx, MetaKey(ns, name), &cur)
		if err != nil {
			return nil, fmt.Errorf("suspend workload %s/%s: %w", ns, name, err)
		}
		if ver == 0 {
			return nil, fmt.Errorf("workload %s/%s: %w", ns, name, ErrNotFound)
		}
		if cur.Owner.Kind != api.OwnerGit {
			return nil, fmt.Errorf("workload %s/%s is managed by the API, not by a Git source: %w", ns, name, ErrConflict)
		}
		if cur.Suspended == suspended {
			return &cur, nil
		}
		cur.Suspended = suspended
		cur.UpdatedAt = r.now().UTC()
		op, err := putJSON(MetaKey(ns, name), cur)
		if err != nil {
			return nil, err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: ver}}, []store.Op{op}, nil)
		if err != nil {
			return nil, fmt.Errorf("suspend workload %s/%s: %w", ns, name, err)
		}
		if ok {
			return &cur, nil
		}
	}
	return nil, fmt.Errorf("suspend workload %s/%s: %w: too many concurrent writers", ns, name, ErrConflict)
}
