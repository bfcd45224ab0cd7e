package resources

import (
	"context"
	"errors"
	"fmt"

	"kat.dws.rip/kat/store"
)

// GetNodeStatus returns a node's last reported status.
func (r *Repo) GetNodeStatus(ctx context.Context, node string) (*NodeStatus, error) {
	var st NodeStatus
	ver, err := r.getJSON(ctx, NodeStatusKey(node), &st)
	if err != nil {
		return nil, fmt.Errorf("read status of node %q: %w", node, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("status of node %q: %w", node, ErrNotFound)
	}
	return &st, nil
}

// ListNodeStatuses returns every node's last reported status.
func (r *Repo) ListNodeStatuses(ctx context.Context) ([]NodeStatus, error) {
	nodes, err := r.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []NodeStatus
	for _, n := range nodes {
		if n.Status != nil {
			out = append(out, *n.Status)
		}
	}
	return out, nil
}

// PutWorkloadStatus writes a workload's status, only while the workload
// exists: a status never outlives its workload's deletion.
func (r *Repo) PutWorkloadStatus(ctx context.Context, ns, name string, st WorkloadStatus) error {
	op, err := putJSON(StatusKey(ns, name), st)
	if err != nil {
		return err
	}
	kv, err := r.st.Get(ctx, MetaKey(ns, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	if _, err := r.st.DoTransaction(ctx, []store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: kv.Version}}, []store.Op{op}, nil); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	return nil
}

// UpdateWorkloadStatus replaces the status of workload ns/name with what fn
// makes of the stored one, in a transaction that fails when another writer
// (SetWorkloadCondition) changed it meanwhile; fn then runs again on the
// newer status, so no writer's condition is lost. fn returns false to write
// nothing. A missing workload is not an error.
func (r *Repo) UpdateWorkloadStatus(ctx context.Context, ns, name string, fn func(prev WorkloadStatus) (WorkloadStatus, bool)) error {
	for range maxTxnAttempts {
		meta, err := r.st.Get(ctx, MetaKey(ns, name))
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		var prev WorkloadStatus
		ver, err := r.getJSON(ctx, StatusKey(ns, name), &prev)
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		next, write := fn(prev)
		if !write {
			return nil
		}
		op, err := putJSON(StatusKey(ns, name), next)
		if err != nil {
			return err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{
			{Key: MetaKey(ns, name), ExpectedVersion: meta.Version}, {Key: StatusKey(ns, name), ExpectedVersion: ver},
		}, []store.Op{op}, nil)
		if err != nil {
			return fmt.Errorf("update status of %s/%s: %w", ns, name, err)
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("update status of %s/%s: %w: too many concurrent writers", ns, name, ErrConflict)
}
