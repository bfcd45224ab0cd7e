package agent

import (
	"errors"
	"fmt"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// stepKind is the single next thing the agent does for one instance.
type stepKind int

const (
	stepNone   stepKind = iota // nothing to do
	stepWait                   // a timer (back-off) or an unknown state: look again later
	stepCreate                 // pull the image if needed, create and start a container
	stepStart                  // start the existing container (a first start or a restart)
	stepRemove                 // stop and remove a container no longer assigned
)

func (k stepKind) String() string {
	return [...]string{"none", "wait", "create", "start", "remove"}[k]
}

// instanceState is what the agent remembers about one instance between
// passes. Restarts and the MaxCount window survive an agent restart through
// the node status the agent reported last.
type instanceState struct {
	Restarts       int
	WindowRestarts int
	WindowStart    time.Time
	// handledRun is the StartedAt of the run whose exit was judged.
	handledRun time.Time
	Failed     bool
	Succeeded  bool
	// Retry is the back-off: when the next step may run.
	Retry retryState
	// NodeRetry is true while the last step failed for a cause of the
	// node (stepEnd.node): the step is retried within nodeRetryCap, and
	// at once when the node recovers.
	NodeRetry bool
	Message   string
	Health    healthState
	// Verify is the verify command's verdict, when the spec has one.
	Verify verifyState
	// finishedBefore is true when the status this node reported before the
	// agent started said the instance had succeeded or failed: a Job's
	// instance runs once, so one whose container is gone is not created
	// again.
	finishedBefore bool
}

// restartRule is the part of restartPolicy the decision needs.
type restartRule struct {
	Condition    string
	MaxRestarts  int
	ResetSeconds int
	// Backoff is the first restart's delay. Default restartBackoffBase.
	Backoff time.Duration
	// Job is true for an instance of a Job: exit code 0 is
	// Succeeded whatever the policy (Always restarts it only on failure),
	// and a finished instance is never created again; the leader retries a
	// failed one with a new instance, up to the Job's backoffLimit.
	Job bool
}

func ruleOf(q *quadlet.Quadlet, base time.Duration) restartRule {
	rp := q.Workload.Spec.RestartPolicy
	return restartRule{Condition: rp.Condition, MaxRestarts: rp.MaxRestarts, ResetSeconds: rp.ResetSeconds, Backoff: base,
		Job: q.Workload.Spec.Type == quadlet.TypeJob}
}

// decideInstance returns the single next step for one instance and its
// updated state. assigned reports whether the instance is assigned to this
// node; c is its container, nil when there is none. It is pure.
func decideInstance(assigned bool, rule restartRule, c *runtime.ContainerStatus, st instanceState, now time.Time) (stepKind, instanceState) {
	if !assigned {
		if c == nil {
			return stepNone, st
		}
		return stepRemove, st
	}
	if c == nil {
		if st.Failed || (rule.Job && (st.Succeeded || st.finishedBefore)) {
			return stepNone, st
		}
		if !st.Retry.due(now) {
			return stepWait, st
		}
		return stepCreate, st
	}
	switch c.State {
	case runtime.StateRunning, runtime.StatePaused:
		st.Message = ""
		return stepNone, st
	case runtime.StateCreated:
		if !st.Retry.due(now) {
			return stepWait, st
		}
		return stepStart, st
	case runtime.StateExited:
		return decideExited(rule, c, st, now)
	default: // unknown: wait for the runtime to make up its mind
		return stepWait, st
	}
}

func decideExited(rule restartRule, c *runtime.ContainerStatus, st instanceState, now time.Time) (stepKind, instanceState) {
	if !c.StartedAt.IsZero() && !c.StartedAt.Equal(st.handledRun) {
		st = judgeExit(rule, c, st, now)
	}
	switch {
	case st.Failed || st.Succeeded:
		return stepNone, st
	case !st.Retry.due(now):
		return stepWait, st
	default:
		return stepStart, st
	}
}

// judgeExit applies the restart policy to a run that has just been seen to
// end.
func judgeExit(rule restartRule, c *runtime.ContainerStatus, st instanceState, now time.Time) instanceState {
	st.handledRun = c.StartedAt
	st.Failed, st.Succeeded = false, false
	if !c.FinishedAt.IsZero() && c.FinishedAt.Sub(c.StartedAt) >= stableRun {
		st.Retry = st.Retry.stable()
	}
	if rule.Job && c.ExitCode == 0 {
		st.Succeeded, st.Message = true, ""
		return st
	}
	switch rule.Condition {
	case quadlet.RestartNever:
		if c.ExitCode == 0 {
			st.Succeeded = true
		} else {
			st.Failed = true
			st.Message = fmt.Sprintf("exited with code %d; restart policy Never", c.ExitCode)
		}
		return st
	case quadlet.RestartMaxCount:
		if c.ExitCode == 0 {
			st.Succeeded = true
			return st
		}
		if st.WindowStart.IsZero() || now.Sub(st.WindowStart) > time.Duration(rule.ResetSeconds)*time.Second {
			st.WindowStart, st.WindowRestarts = now, 0
		}
		if st.WindowRestarts >= rule.MaxRestarts {
			st.Failed = true
			st.Message = fmt.Sprintf("exited with code %d after %d restarts within %ds (maxRestarts %d)",
				c.ExitCode, st.WindowRestarts, rule.ResetSeconds, rule.MaxRestarts)
			return st
		}
	}
	var wait time.Duration
	st.Retry, wait = st.Retry.afterExit(rule.Backoff, now)
	st.Message = fmt.Sprintf("exited with code %d; restarting in %s", c.ExitCode, wait)
	return st
}

// restarted records a successful restart.
func (st instanceState) restarted() instanceState {
	st.Restarts++
	st.WindowRestarts++
	st.Retry = st.Retry.restarted()
	st.Health = healthState{}
	return st
}

// stepEnd is how one step ended, as far as the decision after it needs.
type stepEnd struct {
	step stepKind
	// restart is true for a start of a container that ran before.
	restart bool
	err     error
	// stopped is true when the agent stopped meanwhile: a failure then
	// says nothing about the instance.
	stopped bool
	// node is true when err has a cause of the node, not of the instance
	// (nodeCause).
	node bool
}

// stepVerdict is what afterStep made of a step's end.
type stepVerdict int

const (
	verdictDone        stepVerdict = iota // the step did what it was for
	verdictRestarted                      // a restart: counted
	verdictStopped                        // the agent stopped: nothing recorded
	verdictHostMissing                    // a program the runtime needs is missing: retried, not the instance's fault
	verdictInvalid                        // the spec cannot run: the instance fails
	verdictRetry                          // failed: retried after a back-off
)

// afterStep folds how a step ended into the instance's state, and says what
// it made of it; wait is the back-off before a retry. A failed step is
// retried with back-off (Retry.afterFailure; short when the node failed it:
// e.node, or a program missing), except one whose spec cannot run
// (runtime.ErrInvalidSpec), which fails the instance. It is pure.
func afterStep(st instanceState, rule restartRule, e stepEnd, now time.Time) (next instanceState, v stepVerdict, wait time.Duration) {
	switch {
	case e.err == nil && e.step == stepStart && e.restart:
		return st.restarted(), verdictRestarted, 0
	case e.err == nil:
		st.Retry, st.NodeRetry = st.Retry.succeeded(), false
		if e.step != stepRemove {
			st.Message = ""
		}
		return st, verdictDone, 0
	case e.stopped:
		return st, verdictStopped, 0
	case errors.Is(e.err, runtime.ErrHostPrerequisite):
		v = verdictHostMissing
	case errors.Is(e.err, runtime.ErrInvalidSpec):
		st.Failed, st.Message, st.NodeRetry = true, e.err.Error(), false
		return st, verdictInvalid, 0
	default:
		v = verdictRetry
	}
	node := e.node || v == verdictHostMissing
	st.NodeRetry = node
	st.Retry, wait = st.Retry.afterFailure(rule.Backoff, node, now)
	st.Message = e.err.Error()
	return st, v, wait
}
