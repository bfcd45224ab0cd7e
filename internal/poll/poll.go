// Package poll waits for a condition: it checks it until it holds or a
// context ends, starting fast and backing off, so nothing waits a fixed
// time and nothing waits forever.
//
//	err := poll.Wait(ctx, func() (bool, error) { return probe() })
//
// A caller that measures when a condition starts to hold checks it at a
// fixed interval instead (WaitEvery), so that the back-off does not add to
// what it measures. Tests wait through package polltest, which fails the
// test naming what it waited for; this package links no testing, so
// programs use it too.
package poll

import (
	"context"
	"fmt"
	"time"
)

// The delay between checks starts at firstDelay and doubles up to maxDelay.
const (
	firstDelay = 5 * time.Millisecond
	maxDelay   = 250 * time.Millisecond
)

// Wait checks cond until it reports done or ctx ends, the delay between
// checks starting at 5ms and doubling up to 250ms. It returns nil once
// done; otherwise ctx's error joined with cond's last error.
func Wait(ctx context.Context, cond func() (done bool, err error)) error {
	return wait(ctx, backoff, cond)
}

// WaitEvery checks cond every interval (not backing off) until it reports
// done or ctx ends, and returns as Wait does.
func WaitEvery(ctx context.Context, interval time.Duration, cond func() (done bool, err error)) error {
	return wait(ctx, func(time.Duration) time.Duration { return interval }, cond)
}

// backoff is the delay after one of delay: doubled, up to maxDelay.
func backoff(delay time.Duration) time.Duration { return min(2*delay, maxDelay) }

func wait(ctx context.Context, next func(time.Duration) time.Duration, cond func() (done bool, err error)) error {
	delay := next(firstDelay / 2)
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			if last == nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (last: %w)", ctx.Err(), last)
		case <-t.C:
		}
		done, err := cond()
		if done {
			return nil
		}
		last = err
		t.Reset(delay)
		delay = next(delay)
	}
}
