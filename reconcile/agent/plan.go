package agent

import (
	"cmp"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// Restart back-off: the first restart waits restartBackoffBase, each quick
// exit doubles it up to restartBackoffCap; a run of stableRun or longer
// starts over.
const (
	restartBackoffBase = time.Second
	restartBackoffCap  = 5 * time.Minute
	stableRun          = 10 * time.Second
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
	// streak counts quick exits in a row, for the back-off.
	streak int
	// handledRun is the StartedAt of the run whose exit was judged.
	handledRun  time.Time
	Failed      bool
	Succeeded   bool
	NextAttempt time.Time
	Message     string
	Health      healthState
	// Verify is the verify command's verdict, when the spec has one.
	Verify verifyState
	// createErrors counts failed creates in a row, for the back-off.
	createErrors int
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

// backoff is the wait before restart number streak+1: base doubled per quick
// exit, capped at restartBackoffCap.
func backoff(base time.Duration, streak int) time.Duration {
	if base <= 0 {
		base = restartBackoffBase
	}
	d := base << min(streak, 20)
	return min(d, restartBackoffCap)
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
		if now.Before(st.NextAttempt) {
			return stepWait, st
		}
		return stepCreate, st
	}
	switch c.State {
	case runtime.StateRunning, runtime.StatePaused:
		st.Message = ""
		return stepNone, st
	case runtime.StateCreated:
		if now.Before(st.NextAttempt) {
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
	case now.Before(st.NextAttempt):
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
		st.streak = 0
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
	wait := backoff(rule.Backoff, st.streak)
	st.NextAttempt = now.Add(wait)
	st.Message = fmt.Sprintf("exited with code %d; restarting in %s", c.ExitCode, wait)
	return st
}

// restarted records a successful restart.
func (st instanceState) restarted() instanceState {
	st.Restarts++
	st.WindowRestarts++
	st.streak++
	st.Health = healthState{}
	return st
}

// instanceReport renders one instance for the heartbeat. It is pure.
func instanceReport(a api.Assignment, c *runtime.ContainerStatus, st instanceState, hasHealthCheck, hasVerify bool) api.InstanceStatus {
	r := api.InstanceStatus{
		WorkloadName: a.Workload, Namespace: a.Namespace, InstanceID: a.InstanceID, Generation: a.Generation,
		SpecHash: a.SpecHash, Image: a.Image, Restarts: st.Restarts, RestartWindowStart: st.WindowStart,
		WindowRestarts: st.WindowRestarts, Phase: api.InstancePending, HealthStatus: api.HealthNotApplicable,
		Message: st.Message,
	}
	if hasHealthCheck {
		r.HealthStatus = api.HealthPending
	}
	if c != nil {
		r.ContainerID, r.ImageID, r.State, r.ExitCode, r.StartedAt = c.ID, c.ImageID, string(c.State), c.ExitCode, c.StartedAt
		for _, p := range c.Ports {
			r.Ports = append(r.Ports, api.PublishedPort{HostIP: p.HostIP, HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
		}
	}
	switch {
	case st.Failed:
		r.Phase = api.InstanceFailed
	case st.Succeeded:
		r.Phase = api.InstanceSucceeded
	case c != nil && (c.State == runtime.StateRunning || c.State == runtime.StatePaused):
		r.Phase = api.InstanceRunning
		if hasHealthCheck && st.Health.Status != "" {
			r.HealthStatus = st.Health.Status
		}
	}
	if r.Phase != api.InstanceRunning && hasHealthCheck {
		r.HealthStatus = api.HealthPending
	}
	if hasVerify {
		r.Verification, r.VerifyMessage = cmp.Or(st.Verify.Status, api.VerifyPending), st.Verify.Message
	}
	return r
}
