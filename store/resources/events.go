package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// DefaultEventKeep is how many events AppendEvent keeps.
const DefaultEventKeep = 500

// AppendEvent records ev (its Time defaults to now) and deletes the oldest
// events beyond DefaultEventKeep. Make ev with api.ObjectRef.Event, so
// that it carries the object's kind, namespace, name and uid; an event
// with only an Object string gets them from it (api.Event.Normalize).
func (r *Repo) AppendEvent(ctx context.Context, ev api.Event) error {
	return r.AppendEvents(ctx, []api.Event{ev})
}

// RecordEvent records an event of type typ about obj: the shortest way
// for a loop to say what happened.
func (r *Repo) RecordEvent(ctx context.Context, obj api.ObjectRef, typ, reason, message string) error {
	return r.AppendEvent(ctx, obj.Event(typ, reason, message))
}

// AppendEvents records evs, in order, as AppendEvent does, several to a
// transaction: a pass that ends thousands of rollouts records their events
// in a few writes, not thousands.
func (r *Repo) AppendEvents(ctx context.Context, evs []api.Event) error {
	entries := make([]cappedEntry, len(evs))
	for i, ev := range evs {
		if ev.Time.IsZero() {
			ev.Time = r.now().UTC()
		}
		if ev.Type == "" {
			ev.Type = api.EventNormal
		}
		ev.Normalize()
		entries[i] = cappedEntry{ev.Time, ev}
	}
	return r.appendCappedMany(ctx, prefixEvents, "events", entries, DefaultEventKeep)
}

// ListEvents returns the newest limit events (all when limit <= 0), oldest
// first.
func (r *Repo) ListEvents(ctx context.Context, limit int) ([]api.Event, error) {
	out, _, err := r.ListEventsMatching(ctx, api.EventFilter{}, limit)
	return out, err
}

// ListEventsMatching returns the newest limit events that pass f (all of
// them when limit <= 0), oldest first, and the store revision the list
// reflects: WatchEvents from it misses none.
func (r *Repo) ListEventsMatching(ctx context.Context, f api.EventFilter, limit int) ([]api.Event, int64, error) {
	kvs, rev, err := r.st.ListWithRevision(ctx, prefixEvents)
	if err != nil {
		return nil, 0, fmt.Errorf("list the events: %w", err)
	}
	out := make([]api.Event, 0, len(kvs))
	for _, kv := range kvs {
		ev, err := decodeEvent(kv)
		if err != nil {
			return nil, 0, err
		}
		if f.Match(ev) {
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, rev, nil
}

// WatchEvents sends every event recorded after store revision rev (from
// ListEventsMatching) that passes f, in the order they are recorded, until
// ctx ends; then it closes the channel. A record that cannot be decoded is
// skipped: it cannot become readable by waiting.
func (r *Repo) WatchEvents(ctx context.Context, f api.EventFilter, rev int64) (<-chan api.Event, error) {
	ch, err := r.st.Watch(ctx, prefixEvents, rev+1)
	if err != nil {
		return nil, fmt.Errorf("watch the events: %w", err)
	}
	out := make(chan api.Event)
	go func() {
		defer close(out)
		for we := range ch {
			if we.Type != store.EventTypePut || we.PrevKV != nil {
				continue // trimmed; events are never rewritten
			}
			ev, err := decodeEvent(we.KV)
			if err != nil || !f.Match(ev) {
				continue
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func decodeEvent(kv store.KV) (api.Event, error) {
	var ev api.Event
	if err := json.Unmarshal(kv.Value, &ev); err != nil {
		return ev, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	ev.Normalize()
	return ev, nil
}
