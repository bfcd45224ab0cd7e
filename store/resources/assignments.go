package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// ListAssignments returns the assignments of node, or of every node when node
// is empty, sorted by key.
func (r *Repo) ListAssignments(ctx context.Context, node string) ([]api.Assignment, error) {
	prefix := prefixAssignments
	if node != "" {
		prefix = NodeAssignmentsPrefix(node)
	}
	kvs, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list assignments: %w", err)
	}
	out := make([]api.Assignment, 0, len(kvs))
	for _, kv := range kvs {
		a, err := DecodeAssignment(kv.Value)
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// DecodeAssignment decodes an assignment record.
func DecodeAssignment(b []byte) (api.Assignment, error) {
	var a api.Assignment
	err := json.Unmarshal(b, &a)
	return a, err
}

// ErrAddressTaken means an address WriteAssignments was to record is held
// already (IPAMKey exists): the plan was made from a stale copy, or by
// another leader. Nothing of its transaction was written.
var ErrAddressTaken = errors.New("an instance address is held already")

// WriteAssignments puts and deletes assignments and returns the store
// revision after the last write. A new assignment with an IP is written
// with its IPAMKey, in one transaction that commits only while that key is
// absent, and deleted with it; so an address is never recorded for two
// instances. An assignment written again with LeavingAt set keeps the key
// it has. Up to 100 changes go in one transaction; a larger plan is
// written in several, up to txnsInFlight at once (etcd commits concurrent
// transactions together), the puts before the deletes, so an interrupted
// write starts new instances before removing old ones. A transaction
// refused for a held address makes the error wrap ErrAddressTaken; the
// others may have committed.
func (r *Repo) WriteAssignments(ctx context.Context, put, del []api.Assignment) (int64, error) {
	puts := make([]checkedWrite, 0, len(put))
	for _, a := range put {
		op, err := putJSON(AssignmentKey(a.Node, a.InstanceID), a)
		if err != nil {
			return 0, err
		}
		w := checkedWrite{ops: []store.Op{op}}
		// An assignment with LeavingAt is one written before, marked
		// out of service: its address is recorded already.
		if a.IP.IsValid() && a.LeavingAt.IsZero() {
			k := IPAMKey(a.Node, a.IP)
			w.check = &store.Compare{Key: k, ExpectedVersion: 0}
			w.ops = append(w.ops, store.Op{Type: store.OpPut, Key: k, Value: []byte(a.InstanceID)})
		}
		puts = append(puts, w)
	}
	dels := make([]checkedWrite, 0, len(del))
	for _, a := range del {
		w := checkedWrite{ops: []store.Op{{Type: store.OpDelete, Key: AssignmentKey(a.Node, a.InstanceID)}}}
		if a.IP.IsValid() {
			w.ops = append(w.ops, store.Op{Type: store.OpDelete, Key: IPAMKey(a.Node, a.IP)})
		}
		dels = append(dels, w)
	}
	var rev int64
	for _, ws := range [][]checkedWrite{puts, dels} {
		r2, err := r.writesInBatches(ctx, ws, ErrAddressTaken)
		if err != nil {
			return 0, fmt.Errorf("write assignments: %w", err)
		}
		rev = max(rev, r2)
	}
	return rev, nil
}
