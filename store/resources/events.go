package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"kat.dws.rip/kat/store"
)

// DefaultEventKeep is how many events AppendEvent keeps.
const DefaultEventKeep = 500

var eventSeq atomic.Uint64

// eventKey orders events by time; the sequence keeps two events of one
// nanosecond apart.
func eventKey(t time.Time) string {
	return fmt.Sprintf("%s%020d-%06d", prefixEvents, t.UnixNano(), eventSeq.Add(1)%1_000_000)
}

// AppendEvent records ev (its Time defaults to now) and deletes the oldest
// events beyond DefaultEventKeep.
func (r *Repo) AppendEvent(ctx context.Context, ev Event) error {
	if ev.Time.IsZero() {
		ev.Time = r.now().UTC()
	}
	if ev.Type == "" {
		ev.Type = EventNormal
	}
	op, err := putJSON(eventKey(ev.Time), ev)
	if err != nil {
		return err
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return fmt.Errorf("record event %s: %w", ev.Reason, err)
	}
	kvs, err := r.st.List(ctx, prefixEvents)
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	if extra := len(kvs) - DefaultEventKeep; extra > 0 {
		ops := make([]store.Op, 0, extra)
		for _, kv := range kvs[:extra] {
			ops = append(ops, store.Op{Type: store.OpDelete, Key: kv.Key})
		}
		if _, err := r.st.DoTransaction(ctx, nil, ops, nil); err != nil {
			return fmt.Errorf("trim events: %w", err)
		}
	}
	return nil
}

// ListEvents returns the newest limit events (all when limit <= 0), oldest
// first.
func (r *Repo) ListEvents(ctx context.Context, limit int) ([]Event, error) {
	kvs, err := r.st.List(ctx, prefixEvents)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	if limit > 0 && len(kvs) > limit {
		kvs = kvs[len(kvs)-limit:]
	}
	out := make([]Event, 0, len(kvs))
	for _, kv := range kvs {
		var ev Event
		if err := json.Unmarshal(kv.Value, &ev); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, ev)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}
