package resources

import (
	"context"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// prefixDaemonRollout is where the leader keeps DaemonServices' node-by-node
// updates.
const prefixDaemonRollout = "/kat/workloads/daemonrollout/"

// DaemonRolloutPrefix is the prefix of every DaemonRollout record.
func DaemonRolloutPrefix() string { return prefixDaemonRollout }

// DaemonRolloutKey is where the leader keeps the node-by-node update of
// DaemonService ns/name.
func DaemonRolloutKey(ns, name string) string { return prefixDaemonRollout + ns + "/" + name }

// WriteDaemonRollouts puts the records put and deletes the records of the
// workloads del ("ns/name"), in one transaction, and returns its revision
// (0 when there was nothing to write).
func (r *Repo) WriteDaemonRollouts(ctx context.Context, put []api.DaemonRolloutRecord, del []string) (int64, error) {
	if len(put) == 0 && len(del) == 0 {
		return 0, nil
	}
	ops := make([]store.Op, 0, len(put)+len(del))
	for i := range put {
		op, err := putJSON(DaemonRolloutKey(put[i].Namespace, put[i].Workload), &put[i])
		if err != nil {
			return 0, err
		}
		ops = append(ops, op)
	}
	for _, k := range del {
		ns, name := SplitKey(k)
		ops = append(ops, store.Op{Type: store.OpDelete, Key: DaemonRolloutKey(ns, name)})
	}
	res, err := r.st.Txn(ctx, nil, ops, nil)
	if err != nil {
		return 0, fmt.Errorf("write daemon rollouts: %w", err)
	}
	return res.Revision, nil
}

// GetDaemonRollout returns the node-by-node update record of DaemonService
// ns/name, or nil when it has none.
func (r *Repo) GetDaemonRollout(ctx context.Context, ns, name string) (*api.DaemonRolloutRecord, error) {
	var d api.DaemonRolloutRecord
	ver, err := r.getJSON(ctx, DaemonRolloutKey(ns, name), &d)
	if err != nil {
		return nil, fmt.Errorf("get daemon rollout of %s/%s: %w", ns, name, err)
	}
	if ver == 0 {
		return nil, nil
	}
	return &d, nil
}
