package leader

import (
	"context"
	"time"
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
// those it saw last, until ctx ends.
func (l *Leader) nodeLossClock(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var seen map[string]bool
	for {
		l.lossScans.Add(1)
		ready, next := l.view.readyNodes(l.cfg.Now())
		for n := range seen {
			if !ready[n] {
				l.view.markAll(factNodes)
				break
			}
		}
		seen = ready
		if !l.sleepUntil(ctx, timer, next, l.view.beatWake) {
			return nil
		}
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
