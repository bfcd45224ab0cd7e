// Package polltest is the one way KAT's tests wait for something to happen:
// it checks a condition until it holds or a deadline passes (package poll,
// starting fast and backing off) and fails the test naming what it waited
// for, so tests never sleep a fixed time and never wait forever.
//
//	polltest.Until(t, 10*time.Second, "the workload is ready", func() bool { return ready() })
//	polltest.UntilErr(t, 10*time.Second, "the API answers", func() error { return ping() })
//
// A benchmark that measures when a condition starts to hold checks it at a
// fixed interval instead (UntilEvery), so that the back-off does not add to
// what it measures. Outside a test's goroutine, use poll.Wait.
package polltest

import (
	"context"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll"
)

// Until checks cond until it returns true and fails tb, naming what it
// waited for, when timeout passes first.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	until(tb, timeout, what, poll.Wait, boolCond(cond))
}

// UntilErr checks cond until it returns nil and fails tb when timeout passes
// first, naming what it waited for and cond's last error.
func UntilErr(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	until(tb, timeout, what, poll.Wait, func() (bool, error) {
		err := cond()
		return err == nil, err
	})
}

// UntilEvery checks cond every interval (not backing off) until it returns
// true and fails tb when timeout passes first: for a benchmark that measures
// the moment cond starts to hold.
func UntilEvery(tb testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	tb.Helper()
	every := func(ctx context.Context, cond func() (bool, error)) error { return poll.WaitEvery(ctx, interval, cond) }
	until(tb, timeout, what, every, boolCond(cond))
}

func boolCond(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}

func until(tb testing.TB, timeout time.Duration, what string, wait func(context.Context, func() (bool, error)) error, cond func() (bool, error)) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := wait(ctx, cond); err != nil {
		tb.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}
