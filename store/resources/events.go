package resources

import (
	"context"
	"sort"

	"kat.dws.rip/kat/api"
)

// DefaultEventKeep is how many events AppendEvent keeps.
const DefaultEventKeep = 500

// AppendEvent records ev (its Time defaults to now) and deletes the oldest
// events beyond DefaultEventKeep.
func (r *Repo) AppendEvent(ctx context.Context, ev api.Event) error {
	return r.AppendEvents(ctx, []api.Event{ev})
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
		entries[i] = cappedEntry{ev.Time, ev}
	}
	return r.appendCappedMany(ctx, prefixEvents, "events", entries, DefaultEventKeep)
}

// ListEvents returns the newest limit events (all when limit <= 0), oldest
// first.
func (r *Repo) ListEvents(ctx context.Context, limit int) ([]api.Event, error) {
	out, err := listCapped[api.Event](ctx, r, prefixEvents, "events")
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}
