package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

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

// maxOpsPerTxn stays under etcd's default limit of 128 operations per
// transaction.
const maxOpsPerTxn = 100

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
	puts := make([]assignmentWrite, 0, len(put))
	for _, a := range put {
		op, err := putJSON(AssignmentKey(a.Node, a.InstanceID), a)
		if err != nil {
			return 0, err
		}
		w := assignmentWrite{ops: []store.Op{op}}
		// An assignment with LeavingAt is one written before, marked
		// out of service: its address is recorded already.
		if a.IP.IsValid() && a.LeavingAt.IsZero() {
			k := IPAMKey(a.Node, a.IP)
			w.check = &store.Compare{Key: k, ExpectedVersion: 0}
			w.ops = append(w.ops, store.Op{Type: store.OpPut, Key: k, Value: []byte(a.InstanceID)})
		}
		puts = append(puts, w)
	}
	dels := make([]assignmentWrite, 0, len(del))
	for _, a := range del {
		w := assignmentWrite{ops: []store.Op{{Type: store.OpDelete, Key: AssignmentKey(a.Node, a.InstanceID)}}}
		if a.IP.IsValid() {
			w.ops = append(w.ops, store.Op{Type: store.OpDelete, Key: IPAMKey(a.Node, a.IP)})
		}
		dels = append(dels, w)
	}
	var rev int64
	for _, ws := range [][]assignmentWrite{puts, dels} {
		r2, err := r.writesInBatches(ctx, ws)
		if err != nil {
			return 0, fmt.Errorf("write assignments: %w", err)
		}
		rev = max(rev, r2)
	}
	return rev, nil
}

// assignmentWrite is the ops of one assignment, and the check they need.
type assignmentWrite struct {
	check *store.Compare
	ops   []store.Op
}

// txnsInFlight bounds the transactions WriteAssignments has in flight.
const txnsInFlight = 4

// txnsInBatches writes ops in transactions of up to maxOpsPerTxn ops and
// maxTxnBytes, up to txnsInFlight at once, and returns the highest
// revision they made.
func (r *Repo) txnsInBatches(ctx context.Context, ops []store.Op) (int64, error) {
	ws := make([]assignmentWrite, len(ops))
	for i, op := range ops {
		ws[i] = assignmentWrite{ops: []store.Op{op}}
	}
	return r.writesInBatches(ctx, ws)
}

// writesInBatches writes ws in transactions of up to maxOpsPerTxn ops and
// maxTxnBytes of keys and values (the ops of one write stay together, and
// commit only while its check holds), up to txnsInFlight at once, and
// returns the highest revision they made.
func (r *Repo) writesInBatches(ctx context.Context, ws []assignmentWrite) (int64, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(txnsInFlight)
	var mu sync.Mutex
	var rev int64
	for len(ws) > 0 {
		var checks []store.Compare
		var ops []store.Op
		n, size := 0, 0
		for ; n < len(ws) && len(ops)+len(ws[n].ops) <= maxOpsPerTxn; n++ {
			w := opsBytes(nil, ws[n].ops)
			if n > 0 && size+w > maxTxnBytes {
				break
			}
			size += w
			ops = append(ops, ws[n].ops...)
			if c := ws[n].check; c != nil {
				checks = append(checks, *c)
			}
		}
		ws = ws[n:]
		g.Go(func() error {
			res, err := r.st.Txn(gctx, checks, ops, nil)
			if err != nil {
				return err
			}
			if !res.Committed {
				return fmt.Errorf("%w: one of %s", ErrAddressTaken, describeKeys(checks))
			}
			mu.Lock()
			rev = max(rev, res.Revision)
			mu.Unlock()
			return nil
		})
	}
	return rev, g.Wait()
}

// describeKeys lists the keys of checks, the first few.
func describeKeys(checks []store.Compare) string {
	keys := make([]string, 0, min(len(checks), 4))
	for i, c := range checks {
		if i == 3 {
			keys = append(keys, fmt.Sprintf("and %d more", len(checks)-3))
			break
		}
		keys = append(keys, c.Key)
	}
	return strings.Join(keys, ", ")
}
