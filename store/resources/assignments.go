package resources

import (
	"bytes"
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
	return r.listAssignments(ctx, node, nil, decodeWithFiles)
}

// ListAssignmentsWithoutFiles is ListAssignments with every Files left out
// (nil): for readers that count or show instances, which a generation's
// files, the bulk of a record, would only slow.
func (r *Repo) ListAssignmentsWithoutFiles(ctx context.Context, node string) ([]api.Assignment, error) {
	return r.listAssignments(ctx, node, nil, decodeWithoutFiles)
}

// GetAssignment returns one assignment with its files, or an error
// wrapping ErrNotFound when node holds no instance id.
func (r *Repo) GetAssignment(ctx context.Context, node, id string) (api.Assignment, error) {
	kv, err := r.st.Get(ctx, AssignmentKey(node, id))
	if errors.Is(err, store.ErrNotFound) {
		return api.Assignment{}, fmt.Errorf("assignment %s of node %s: %w", id, node, ErrNotFound)
	}
	if err != nil {
		return api.Assignment{}, fmt.Errorf("read assignment %s of node %s: %w", id, node, err)
	}
	a, err := DecodeAssignment(kv.Value)
	if err != nil {
		return api.Assignment{}, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	return a, nil
}

// ListWorkloadAssignments returns the assignments of one workload, sorted by
// key, without their Files. The keys name the node, not the workload: every
// assignment is read, but one of another workload is passed over unless its
// record holds the workload's namespace and name as JSON strings, and then
// only those two fields are decoded. The records are json.Marshal's
// (putJSON), which encodes a string one way only, so that test drops no
// assignment of the workload.
func (r *Repo) ListWorkloadAssignments(ctx context.Context, ns, name string) ([]api.Assignment, error) {
	nsJSON, err := json.Marshal(ns)
	if err != nil {
		return nil, fmt.Errorf("list assignments of %s/%s: %w", ns, name, err)
	}
	nameJSON, err := json.Marshal(name)
	if err != nil {
		return nil, fmt.Errorf("list assignments of %s/%s: %w", ns, name, err)
	}
	ofWorkload := func(b []byte) (bool, error) {
		if !bytes.Contains(b, nameJSON) || !bytes.Contains(b, nsJSON) {
			return false, nil
		}
		var h struct {
			Namespace string `json:"namespace"`
			Workload  string `json:"workload"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			return false, err
		}
		return h.Namespace == ns && h.Workload == name, nil
	}
	return r.listAssignments(ctx, "", ofWorkload, decodeWithoutFiles)
}

// listAssignments lists the assignments of node (every node for ""), keeps
// those keep accepts (all when nil) and decodes them with decode.
func (r *Repo) listAssignments(ctx context.Context, node string, keep func([]byte) (bool, error), decode func([]byte, *api.Assignment) error) ([]api.Assignment, error) {
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
		if keep != nil {
			ok, err := keep(kv.Value)
			if err != nil {
				return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
			}
			if !ok {
				continue
			}
		}
		var a api.Assignment
		if err := decode(kv.Value, &a); err != nil {
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

func decodeWithFiles(b []byte, a *api.Assignment) error { return json.Unmarshal(b, a) }

// decodeWithoutFiles decodes an assignment record into a leaving Files nil:
// the files are checked as JSON but neither copied nor base64-decoded.
func decodeWithoutFiles(b []byte, a *api.Assignment) error {
	v := struct {
		*api.Assignment
		Files skippedJSON `json:"files,omitempty"`
	}{Assignment: a}
	return json.Unmarshal(b, &v)
}

// skippedJSON is a JSON value decoded into nothing.
type skippedJSON struct{}

// UnmarshalJSON ignores b.
func (skippedJSON) UnmarshalJSON([]byte) error { return nil }

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
