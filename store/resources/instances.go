package resources

import (
	"context"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// GetNodeStatus returns a node's last reported status.
func (r *Repo) GetNodeStatus(ctx context.Context, node string) (*api.NodeStatus, error) {
	var st api.NodeStatus
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
func (r *Repo) ListNodeStatuses(ctx context.Context) ([]api.NodeStatus, error) {
	nodes, err := r.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []api.NodeStatus
	for _, n := range nodes {
		if n.Status != nil {
			out = append(out, *n.Status)
		}
	}
	return out, nil
}

// WriteWorkloadStatus writes the status of workload ns/name when the
// workload's meta is still at metaVersion and its status at statusVersion (0:
// none yet), and reports whether it wrote. The leader's status loop is the
// only writer of workload statuses; the checks keep a status from outliving
// its workload's deletion and from overwriting a newer derivation. It also
// returns the store revision after the attempt.
func (r *Repo) WriteWorkloadStatus(ctx context.Context, ns, name string, st api.WorkloadStatus, metaVersion, statusVersion int64) (bool, int64, error) {
	op, err := putJSON(StatusKey(ns, name), st)
	if err != nil {
		return false, 0, err
	}
	res, err := r.st.Txn(ctx, []store.Compare{
		{Key: MetaKey(ns, name), ExpectedVersion: metaVersion},
		{Key: StatusKey(ns, name), ExpectedVersion: statusVersion},
	}, []store.Op{op}, nil)
	if err != nil {
		return false, 0, fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	return res.Committed, res.Revision, nil
}
