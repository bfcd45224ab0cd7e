// Package poll is the one way KAT's tests wait for something to happen: it
// checks a condition until it holds or a deadline passes, starting fast and
// backing off, so tests never sleep a fixed time and never wait forever.
//
//	poll.Until(t, 10*time.Second, "the workload is ready", func() bool { return ready() })
//	err := poll.Wait(ctx, func() (bool, error) { return probe() }) // outside a test's goroutine
//
// A benchmark that measures when a condition starts to hold checks it at a
// fixed interval instead (UntilEvery), so that the back-off does not add to
// what it measures.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The delay between checks starts at firstDelay and doubles up to maxDelay.
const (
	firstDelay = 5 * time.Millisecond
	maxDelay   = 250 * time.Millisecond
)

// Until checks cond until it returns true and fails tb, naming what it
// waited for, when timeout passes first.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	UntilErr(tb, timeout, what, boolCond(cond))
}

// UntilErr checks cond until it returns nil and fails tb when timeout passes
// first, naming what it waited for and cond's last error.
func UntilErr(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	until(tb, timeout, what, backoff, cond)
}

// UntilEvery checks cond every interval (not backing off) until it returns
// true and fails tb when timeout passes first: for a benchmark that measures
// the moment cond starts to hold.
func UntilEvery(tb testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	tb.Helper()
	until(tb, timeout, what, func(time.Duration) time.Duration { return interval }, boolCond(cond))
}

func boolCond(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}

func until(tb testing.TB, timeout time.Duration, what string, next func(time.Duration) time.Duration, cond func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait(ctx, next, func() (bool, error) {
		err := cond()
		return err == nil, err
	}); err != nil {
		tb.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// Wait checks cond until it reports done or ctx ends. It returns nil once
// done; otherwise ctx's error joined with cond's last error.
func Wait(ctx context.Context, cond func() (done bool, err error)) error {
	return wait(ctx, backoff, cond)
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
			if last == nil || errors.Is(last, errNotYet) {
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

// errNotYet is the last error of a condition that only said false.
var errNotYet = errors.New("condition not met")
