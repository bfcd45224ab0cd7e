package leader

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
)

// wakeClock marks the workloads placement asked to be woken for dirty when
// their time comes (drain delays, progress deadlines), until ctx ends.
func (l *Leader) wakeClock(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := l.view.dueWakes(l.cfg.Now())
		l.view.markDirty(factTimers, due...)
		if !l.sleepUntil(ctx, timer, next, l.view.wakesChanged) {
			return nil
		}
	}
}

// nodeLossClock wakes placement over every workload when a Ready node
// turns NotReady (no etcd key changes then): it wakes at the first moment
// one would (a heartbeat since only makes that moment early) and when a
// node registers, goes or turns fresh, and compares the Ready nodes with
// those it saw last (recording NodeReady and NodeNotReady events), until
// ctx ends. It also collects the nodes NotReady for long (collect).
func (l *Leader) nodeLossClock(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var seen map[string]bool
	for {
		l.lossScans.Add(1)
		now := l.cfg.Now()
		ready, next := l.view.readyNodes(now)
		for n := range seen {
			if !ready[n] {
				l.view.markAll(factNodes)
				break
			}
		}
		if seen != nil {
			l.readinessEvents(ctx, seen, ready)
		}
		seen = ready
		if due := l.collect(ctx, now); !due.IsZero() && (next.IsZero() || due.Before(next)) {
			next = due
		}
		if !l.sleepUntil(ctx, timer, next, l.view.beatWake) {
			return nil
		}
	}
}

// readinessEvents records a NodeNotReady event for each node Ready in was
// but not in is, and a NodeReady event for each the other way round (the
// term's first look records none: it has nothing to compare with).
func (l *Leader) readinessEvents(ctx context.Context, was, is map[string]bool) {
	var events []api.Event
	now := l.cfg.Now().UTC()
	for _, n := range slices.Sorted(maps.Keys(was)) {
		if !is[n] {
			events = append(events, api.Event{Time: now, Type: api.EventWarning, Object: "node/" + n, Reason: EventNodeNotReady,
				Message: fmt.Sprintf("node %s is NotReady: no heartbeat for %s, or it departed", n, l.cfg.NodeLossTimeout)})
		}
	}
	for _, n := range slices.Sorted(maps.Keys(is)) {
		if !was[n] {
			events = append(events, api.Event{Time: now, Type: api.EventNormal, Object: "node/" + n, Reason: EventNodeReady,
				Message: fmt.Sprintf("node %s is Ready", n)})
		}
	}
	if err := l.cfg.Repo.AppendEvents(ctx, events); err != nil && ctx.Err() == nil {
		l.cfg.Logger.Warn().Err(err).Int("events", len(events)).Msg("cannot record the nodes' readiness events")
	}
}

// sleepUntil waits for next (for ever when it is zero), a poke of wake or
// the end of ctx, with timer (stopped), and reports whether ctx is live.
func (l *Leader) sleepUntil(ctx context.Context, timer *time.Timer, next time.Time, wake <-chan struct{}) bool {
	var fire <-chan time.Time
	if !next.IsZero() {
		timer.Reset(max(0, next.Sub(l.cfg.Now())))
		fire = timer.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-fire:
	case <-wake:
		timer.Stop()
	}
	return true
}
