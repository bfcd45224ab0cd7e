package detach

import (
	"context"
	"time"
)

// Probe tries once to reach the cluster: nil when a member answered.
type Probe func(ctx context.Context) error

// WaitLost probes every interval, each try bounded by the interval, and
// returns nil once no try has succeeded for lost (nodeLossTimeoutSeconds):
// the cluster is lost. It returns ctx's error when ctx ends first.
func WaitLost(ctx context.Context, probe Probe, lost, every time.Duration) error {
	lastOK := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := tryOnce(ctx, probe, every); err == nil {
			lastOK = time.Now()
		} else if time.Since(lastOK) >= lost {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// WaitBack probes every interval and returns nil once times tries in a row
// have succeeded: the cluster is back, not merely flickering. It returns
// ctx's error when ctx ends first. onFail, when not nil, hears every
// failed try.
func WaitBack(ctx context.Context, probe Probe, every time.Duration, times int, onFail func(error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	ok := 0
	for {
		err := tryOnce(ctx, probe, every)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil:
			if ok++; ok >= times {
				return nil
			}
		default:
			ok = 0
			if onFail != nil {
				onFail(err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func tryOnce(ctx context.Context, probe Probe, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return probe(ctx)
}
