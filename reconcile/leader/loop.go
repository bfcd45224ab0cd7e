package leader

import (
	"context"
	"errors"
	"time"

	"kat.dws.rip/kat/internal/metrics"
)

// loop runs pass over every workload once the view has synced and on every
// Resync, and over the workloads whose facts changed on every wake-up, until
// ctx ends. A failed pass is logged and its workloads are retried on the next
// wake-up or resync, unless pass gave them a back-off (errBackedOff).
func (l *Leader) loop(ctx context.Context, sub *subscription, name string, pass func(ctx context.Context, keys []string) error) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", name).Logger()
	defer metrics.QueueDepth(name, 0) // no leader, no queue: a former leader shows none
	t := time.NewTicker(l.cfg.Resync)
	defer t.Stop()
	for {
		l.busy.Add(1) // before take: idle never sees work taken but not done
		keys, all, seen := l.view.take(sub)
		if all || len(keys) > 0 {
			if all {
				keys = nil
			}
			metrics.QueueDepth(name, l.queueDepth(len(keys), all))
			start := time.Now()
			err := pass(ctx, keys)
			if err != nil && ctx.Err() == nil {
				log.Warn().Err(err).Msg("pass failed")
				if !errors.Is(err, errBackedOff) {
					l.view.putBack(sub, keys, all, seen)
				}
			}
			log.Debug().Dur("took", time.Since(start)).Int("workloads", len(keys)).Bool("all", all).Msg("pass")
			if ctx.Err() == nil {
				metrics.ReconcilePass(name, start, err)
				if err == nil {
					metrics.ReconcileLatency(name, seen)
				}
				metrics.QueueDepth(name, l.queueDepth(l.view.pending(sub)))
			}
		}
		l.busy.Add(-1)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.view.putBack(sub, nil, true, time.Now())
		case <-sub.wake:
		}
	}
}

// idle reports whether no placement or status pass is under way and none
// has work waiting.
func (l *Leader) idle() bool {
	if l.busy.Load() > 0 {
		return false
	}
	for _, s := range l.subs {
		if n, all := l.view.pending(s); n > 0 || all {
			return false
		}
	}
	return true
}

// queueDepth is how many workloads n dirty ones, or all, are.
func (l *Leader) queueDepth(n int, all bool) int {
	if all {
		return len(l.view.desired.Keys())
	}
	return n
}
