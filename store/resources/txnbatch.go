package resources

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/store"
)

// Bounds of the transactions the batch writers make: etcd refuses more than
// 128 operations (or checks) in one transaction and requests over 1.5 MiB by
// default.
const (
	// maxOpsPerTxn bounds the operations (and the checks) of one
	// transaction.
	maxOpsPerTxn = 100
	// maxTxnBytes bounds the keys and values of one batch transaction.
	maxTxnBytes = 512 << 10
)

// The two batchers of this file pack many small writes into few
// transactions: writesInBatches (and txnsInBatches) split a list into
// transactions written concurrently, each committed only while the checks
// of its writes hold; a txnBatch gathers items one by one into the next
// transaction, for writers that handle a transaction whose checks fail item
// by item.

// checkedWrite is the ops of one item (an assignment and its address), and
// the check they need; nil: none.
type checkedWrite struct {
	check *store.Compare
	ops   []store.Op
}

// txnsInFlight bounds the transactions writesInBatches has in flight.
const txnsInFlight = 4

// txnsInBatches writes ops in transactions of up to maxOpsPerTxn ops and
// maxTxnBytes, up to txnsInFlight at once, and returns the highest
// revision they made.
func (r *Repo) txnsInBatches(ctx context.Context, ops []store.Op) (int64, error) {
	ws := make([]checkedWrite, len(ops))
	for i, op := range ops {
		ws[i] = checkedWrite{ops: []store.Op{op}}
	}
	return r.writesInBatches(ctx, ws, nil)
}

// writesInBatches writes ws in transactions of up to maxOpsPerTxn ops and
// maxTxnBytes of keys and values (the ops of one write stay together, and
// commit only while its check holds), up to txnsInFlight at once, and
// returns the highest revision they made. A transaction refused because a
// check failed makes the error wrap refused, naming the keys checked.
func (r *Repo) writesInBatches(ctx context.Context, ws []checkedWrite, refused error) (int64, error) {
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
				return fmt.Errorf("%w: one of %s", refused, describeKeys(checks))
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

// txnBatch gathers the checks and writes of several items into one
// transaction within etcd's limits. A check repeated by several items (their
// namespace) is made once.
type txnBatch struct {
	checks  []store.Compare
	checked map[string]bool
	ops     []store.Op
	bytes   int
	members []batchMember
}

// batchMember is one item of a batch: its index in the caller's list and
// what it reports when the batch commits.
type batchMember struct {
	i   int
	res *ApplyResult
}

func opsBytes(checks []store.Compare, ops []store.Op) int {
	n := 0
	for _, c := range checks {
		n += len(c.Key)
	}
	for _, op := range ops {
		n += len(op.Key) + len(op.Value)
	}
	return n
}

// fits reports whether an item's checks and ops can join the batch.
func (b *txnBatch) fits(checks []store.Compare, ops []store.Op) bool {
	return len(b.checks)+len(checks) <= maxOpsPerTxn && len(b.ops)+len(ops) <= maxOpsPerTxn &&
		b.bytes+opsBytes(checks, ops) <= maxTxnBytes
}

func (b *txnBatch) add(m batchMember, checks []store.Compare, ops []store.Op) {
	if b.checked == nil {
		b.checked = map[string]bool{}
	}
	for _, c := range checks {
		k := fmt.Sprintf("%s\x00%d", c.Key, c.ExpectedVersion)
		if !b.checked[k] {
			b.checked[k] = true
			b.checks = append(b.checks, c)
		}
	}
	b.ops = append(b.ops, ops...)
	b.bytes += opsBytes(checks, ops)
	b.members = append(b.members, m)
}

// txn runs the batch as one transaction and empties it.
func (b *txnBatch) txn(ctx context.Context, st store.StateStore) (*store.TxnResult, error) {
	res, err := st.Txn(ctx, b.checks, b.ops, nil)
	*b = txnBatch{}
	return res, err
}

// putAndDelete puts each of put as JSON at its key and deletes the keys
// del, which must lie under prefix, in batches (txnsInBatches); what names
// the records in errors. It returns the revision of the last write.
func putAndDelete[T any](ctx context.Context, r *Repo, what, prefix string, put []T, key func(T) string, del []string) (int64, error) {
	ops := make([]store.Op, 0, len(put)+len(del))
	for _, v := range put {
		op, err := putJSON(key(v), v)
		if err != nil {
			return 0, err
		}
		ops = append(ops, op)
	}
	for _, k := range del {
		if !strings.HasPrefix(k, prefix) {
			return 0, fmt.Errorf("write %s: %s is not under %s", what, k, prefix)
		}
		ops = append(ops, store.Op{Type: store.OpDelete, Key: k})
	}
	rev, err := r.txnsInBatches(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", what, err)
	}
	return rev, nil
}
