package agent

import "time"

// Restart back-off: the first restart waits restartBackoffBase, each quick
// exit doubles it up to restartBackoffCap; a run of stableRun or longer
// starts over. A failed step backs off the same way, counted apart, up to
// nodeRetryCap when the node, not the instance, failed it (nodeCause): the
// runtime unreachable, the node's network not made, a program missing. Such
// a step is also retried at once when the node is seen to recover, so it
// runs again within seconds of its cause going away, however long that
// took.
const (
	restartBackoffBase = time.Second
	restartBackoffCap  = 5 * time.Minute
	nodeRetryCap       = 5 * time.Second
	stableRun          = 10 * time.Second
)

// retryState is an instance's back-off: when its next step may run, and the
// counts the waits grow with. It is the one place the agent keeps back-off
// state; its methods are pure.
type retryState struct {
	// At is when the next step may run; zero: at once.
	At time.Time
	// exits counts quick exits in a row, for the restart back-off.
	exits int
	// failures counts failed steps in a row, for their back-off.
	failures int
}

// due reports whether the next step may run at now.
func (r retryState) due(now time.Time) bool { return !now.Before(r.At) }

// afterExit schedules the restart of a run that just ended: base doubled
// per quick exit before it. It returns the wait.
func (r retryState) afterExit(base time.Duration, now time.Time) (retryState, time.Duration) {
	wait := backoff(base, r.exits)
	r.At = now.Add(wait)
	return r, wait
}

// stable records a run that lasted stableRun or longer: the next quick exit
// waits base again.
func (r retryState) stable() retryState {
	r.exits = 0
	return r
}

// restarted records a restart: the run it starts counts as a quick exit
// until it proves stable.
func (r retryState) restarted() retryState {
	r.exits++
	return r
}

// afterFailure schedules the retry of a failed step: base doubled per failed
// step before it, at most nodeRetryCap when the node failed it. It returns
// the wait.
func (r retryState) afterFailure(base time.Duration, node bool, now time.Time) (retryState, time.Duration) {
	wait := backoff(base, r.failures)
	if node {
		wait = min(wait, nodeRetryCap)
	}
	r.failures++
	r.At = now.Add(wait)
	return r, wait
}

// succeeded records a step that succeeded: the next failure waits base
// again.
func (r retryState) succeeded() retryState {
	r.failures = 0
	return r
}

// backoff is the wait after n quick exits or failures in a row: base doubled
// n times, capped at restartBackoffCap.
func backoff(base time.Duration, n int) time.Duration {
	if base <= 0 {
		base = restartBackoffBase
	}
	d := base << min(n, 20)
	return min(d, restartBackoffCap)
}
