package resources

import (
	"context"
	"fmt"
	"slices"

	"kat.dws.rip/kat/store"
)

// SetSuspended suspends or resumes Git management of a Git-owned workload and
// returns its metadata. A workload the API owns is a conflict: there is no Git
// management to suspend. Resuming only clears the flag; the owning source
// applies Git's version again on its next sync.
func (r *Repo) SetSuspended(ctx context.Context, ns, name string, suspended bool) (*WorkloadMeta, error) {
	for range maxTxnAttempts {
		var cur WorkloadMeta
		ver, err := r.getJSON(ctx, MetaKey(ns, name), &cur)
		if err != nil {
			return nil, fmt.Errorf("suspend workload %s/%s: %w", ns, name, err)
		}
		if ver == 0 {
			return nil, fmt.Errorf("workload %s/%s: %w", ns, name, ErrNotFound)
		}
		if cur.Owner.Kind != OwnerGit {
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

// SetWorkloadCondition sets (or, with status ConditionFalse and no reason,
// clears) one condition of a workload's status, keeping the others. A missing
// workload is not an error: there is nothing to mark.
func (r *Repo) SetWorkloadCondition(ctx context.Context, ns, name string, c Condition) error {
	for range maxTxnAttempts {
		var st WorkloadStatus
		ver, err := r.getJSON(ctx, StatusKey(ns, name), &st)
		if err != nil {
			return fmt.Errorf("set condition %s of %s/%s: %w", c.Type, ns, name, err)
		}
		if ver == 0 {
			return nil
		}
		i := slices.IndexFunc(st.Conditions, func(x Condition) bool { return x.Type == c.Type })
		remove := c.Status == ConditionFalse && c.Reason == ""
		switch {
		case i < 0 && remove:
			return nil
		case i >= 0 && remove:
			st.Conditions = slices.Delete(st.Conditions, i, i+1)
		case i >= 0 && st.Conditions[i].Status == c.Status && st.Conditions[i].Reason == c.Reason && st.Conditions[i].Message == c.Message:
			return nil
		case i >= 0:
			if st.Conditions[i].Status == c.Status {
				c.LastTransitionTime = st.Conditions[i].LastTransitionTime
			}
			st.Conditions[i] = c
		default:
			st.Conditions = append(st.Conditions, c)
		}
		if c.LastTransitionTime.IsZero() && !remove {
			if j := slices.IndexFunc(st.Conditions, func(x Condition) bool { return x.Type == c.Type }); j >= 0 {
				st.Conditions[j].LastTransitionTime = r.now().UTC()
			}
		}
		op, err := putJSON(StatusKey(ns, name), st)
		if err != nil {
			return err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: StatusKey(ns, name), ExpectedVersion: ver}}, []store.Op{op}, nil)
		if err != nil {
			return fmt.Errorf("set condition %s of %s/%s: %w", c.Type, ns, name, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("set condition %s of %s/%s: %w: too many concurrent writers", c.Type, ns, name, ErrConflict)
}
