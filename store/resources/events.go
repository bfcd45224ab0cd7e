package resources

import (
	"context"
	"sort"
)

// DefaultEventKeep is how many events AppendEvent keeps.
const DefaultEventKeep = 500

// AppendEvent records ev (its Time defaults to now) and deletes the oldest
// events beyond DefaultEventKeep.
func (r *Repo) AppendEvent(ctx context.Context, ev Event) error {
	if ev.Time.IsZero() {
		ev.Time = r.now().UTC()
	}
	if ev.Type == "" {
		ev.Type = EventNormal
	}
	return r.appendCapped(ctx, prefixEvents, "events", ev.Time, ev, DefaultEventKeep)
}

// ListEvents returns the newest limit events (all when limit <= 0), oldest
// first.
func (r *Repo) ListEvents(ctx context.Context, limit int) ([]Event, error) {
	out, err := listCapped[Event](ctx, r, prefixEvents, "events")
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}
