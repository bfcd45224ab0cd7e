package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"kat.dws.rip/kat/store"
)

// A capped list is a prefix whose keys sort by time (cappedKey) and whose
// oldest entries are deleted past a number to keep: events and the audit
// log are such lists.

var cappedSeq atomic.Uint64

// cappedKey orders the entries of a capped list by time; the sequence keeps
// two entries of one nanosecond apart.
func cappedKey(prefix string, t time.Time) string {
	return fmt.Sprintf("%s%020d-%06d", prefix, t.UnixNano(), cappedSeq.Add(1)%1_000_000)
}

// appendCapped writes v as the entry of time t under prefix and deletes the
// oldest entries beyond keep (none when keep <= 0). what names the list in
// errors ("events").
func (r *Repo) appendCapped(ctx context.Context, prefix, what string, t time.Time, v any, keep int) error {
	op, err := putJSON(cappedKey(prefix, t), v)
	if err != nil {
		return err
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return fmt.Errorf("append to the %s: %w", what, err)
	}
	if keep <= 0 {
		return nil
	}
	// Counted and trimmed by key alone: the entries' values stay unread.
	n, err := r.st.Count(ctx, prefix)
	if err != nil {
		return fmt.Errorf("count the %s: %w", what, err)
	}
	if extra := int(n) - keep; extra > 0 {
		keys, err := r.st.FirstKeys(ctx, prefix, extra)
		if err != nil {
			return fmt.Errorf("list the oldest of the %s: %w", what, err)
		}
		ops := make([]store.Op, 0, len(keys))
		for _, k := range keys {
			ops = append(ops, store.Op{Type: store.OpDelete, Key: k})
		}
		if _, err := r.st.DoTransaction(ctx, nil, ops, nil); err != nil {
			return fmt.Errorf("trim the %s: %w", what, err)
		}
	}
	return nil
}

// listCapped returns the entries of the capped list under prefix, oldest
// first.
func listCapped[T any](ctx context.Context, r *Repo, prefix, what string) ([]T, error) {
	kvs, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list the %s: %w", what, err)
	}
	out := make([]T, 0, len(kvs))
	for _, kv := range kvs {
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, v)
	}
	return out, nil
}
