package agent

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

func TestDecideInstance(t *testing.T) {
	t.Parallel()
	now := time.Unix(10000, 0)
	started := now.Add(-time.Second)
	exited := func(code int) *runtime.ContainerStatus {
		return &runtime.ContainerStatus{ID: "c1", State: runtime.StateExited, ExitCode: code, StartedAt: started, FinishedAt: now}
	}
	always := restartRule{Condition: quadlet.RestartAlways, Backoff: time.Second}
	maxCount := restartRule{Condition: quadlet.RestartMaxCount, MaxRestarts: 2, ResetSeconds: 60, Backoff: time.Second}
	never := restartRule{Condition: quadlet.RestartNever}
	jobAlways := restartRule{Condition: quadlet.RestartAlways, Backoff: time.Second, Job: true}
	jobNever := restartRule{Condition: quadlet.RestartNever, Job: true}
	tests := []struct {
		name      string
		assigned  bool
		rule      restartRule
		c         *runtime.ContainerStatus
		st        instanceState
		want      stepKind
		failed    bool
		succeeded bool
	}{
		{name: "unassigned without container", want: stepNone},
		{name: "unassigned container is removed", c: &runtime.ContainerStatus{State: runtime.StateRunning}, want: stepRemove},
		{name: "assigned without container is created", assigned: true, rule: always, want: stepCreate},
		{name: "create waits for its back-off", assigned: true, rule: always, st: instanceState{Retry: retryState{At: now.Add(time.Second)}}, want: stepWait},
		{name: "running is left alone", assigned: true, rule: always, c: &runtime.ContainerStatus{State: runtime.StateRunning}, want: stepNone},
		{name: "unknown state waits", assigned: true, rule: always, c: &runtime.ContainerStatus{State: runtime.StateUnknown}, want: stepWait},
		{name: "created is started", assigned: true, rule: always, c: &runtime.ContainerStatus{State: runtime.StateCreated}, want: stepStart},
		{name: "always: a fresh exit waits for the back-off", assigned: true, rule: always, c: exited(137), want: stepWait},
		{name: "always: the back-off over, it restarts", assigned: true, rule: always, c: exited(0),
			st: instanceState{handledRun: started, Retry: retryState{At: now}}, want: stepStart},
		{name: "never: exit 0 succeeds", assigned: true, rule: never, c: exited(0), want: stepNone, succeeded: true},
		{name: "never: exit 1 fails", assigned: true, rule: never, c: exited(1), want: stepNone, failed: true},
		{name: "maxcount: exit 0 succeeds", assigned: true, rule: maxCount, c: exited(0), want: stepNone, succeeded: true},
		{name: "maxcount: below the limit waits to restart", assigned: true, rule: maxCount, c: exited(1),
			st: instanceState{WindowRestarts: 1, WindowStart: now.Add(-time.Second)}, want: stepWait},
		{name: "maxcount: at the limit fails", assigned: true, rule: maxCount, c: exited(1),
			st: instanceState{WindowRestarts: 2, WindowStart: now.Add(-time.Second)}, want: stepNone, failed: true},
		{name: "maxcount: an old window resets", assigned: true, rule: maxCount, c: exited(1),
			st: instanceState{WindowRestarts: 2, WindowStart: now.Add(-time.Hour)}, want: stepWait},
		{name: "failed without container stays failed", assigned: true, rule: maxCount, st: instanceState{Failed: true}, want: stepNone, failed: true},
		{name: "job, always: exit 0 succeeds", assigned: true, rule: jobAlways, c: exited(0), want: stepNone, succeeded: true},
		{name: "job, always: exit 1 restarts after the back-off", assigned: true, rule: jobAlways, c: exited(1), want: stepWait},
		{name: "job, never: exit 1 fails", assigned: true, rule: jobNever, c: exited(1), want: stepNone, failed: true},
		{name: "job: succeeded without container is not created again", assigned: true, rule: jobNever,
			st: instanceState{Succeeded: true}, want: stepNone, succeeded: true},
		{name: "job: finished before an agent restart, container gone, not created again", assigned: true, rule: jobNever,
			st: instanceState{finishedBefore: true}, want: stepNone},
		{name: "service: finished before an agent restart, container gone, created", assigned: true, rule: never,
			st: instanceState{finishedBefore: true}, want: stepCreate},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			step, st := decideInstance(tc.assigned, tc.rule, tc.c, tc.st, now)
			if step != tc.want || st.Failed != tc.failed || st.Succeeded != tc.succeeded {
				t.Fatalf("step %s failed %v succeeded %v; want %s %v %v (state %+v)", step, st.Failed, st.Succeeded, tc.want, tc.failed, tc.succeeded, st)
			}
		})
	}
}

func TestBackoffIsCapped(t *testing.T) {
	t.Parallel()
	if backoff(time.Second, 0) != time.Second || backoff(time.Second, 3) != 8*time.Second || backoff(time.Second, 60) != restartBackoffCap {
		t.Fatalf("backoff: %s %s %s", backoff(time.Second, 0), backoff(time.Second, 3), backoff(time.Second, 60))
	}
}

func TestHealthProbes(t *testing.T) {
	t.Parallel()
	hc := &quadlet.HealthCheck{InitialDelaySeconds: 5, PeriodSeconds: 2, SuccessThreshold: 2, FailureThreshold: 2}
	start := time.Unix(100, 0)
	due, h := probeDue(healthState{}, hc, "c1", start, start.Add(4*time.Second))
	if due {
		t.Fatal("probe due before initialDelaySeconds")
	}
	if due, h = probeDue(h, hc, "c1", start, start.Add(5*time.Second)); !due {
		t.Fatal("probe not due after initialDelaySeconds")
	}
	now := start.Add(5 * time.Second)
	steps := []struct {
		ok   bool
		want string
	}{{true, ""}, {true, api.HealthHealthy}, {false, api.HealthHealthy}, {false, api.HealthUnhealthy}, {true, api.HealthUnhealthy}, {true, api.HealthHealthy}}
	for i, s := range steps {
		h = probeResult(h, hc, s.ok, now)
		if h.Status != s.want {
			t.Fatalf("after result %d (%v): status %q, want %q", i, s.ok, h.Status, s.want)
		}
		if due, _ := probeDue(h, hc, "c1", start, now.Add(time.Second)); due {
			t.Fatal("probe due before periodSeconds")
		}
		now = now.Add(2 * time.Second)
	}
	// The listing's StartedAt differs from the one the create step
	// recorded: the same container keeps its health.
	if _, h2 := probeDue(h, hc, "c1", start.Add(700*time.Millisecond), now); h2.Status != api.HealthHealthy {
		t.Fatalf("the same container seen with another StartedAt lost its health: %q", h2.Status)
	}
	if _, h2 := probeDue(h, hc, "c2", start.Add(time.Hour), now); h2.Status != "" {
		t.Fatal("a new container kept the old health status")
	}
	if _, h2 := probeDue(instanceState{Health: h}.restarted().Health, hc, "c1", start.Add(time.Hour), now); h2.Status != "" {
		t.Fatal("a restarted container kept the old health status")
	}
}

// TestAfterStep: a step that succeeded clears the message and the failed
// steps' back-off (a restart counts instead); a failed one is retried
// after a back-off that doubles per failure, whether the instance's spec or
// the host is to blame, up to nodeRetryCap when the node is to blame (and
// then reported as NodeRetry), except a spec that cannot run, which fails
// the instance; the agent's stop records nothing.
func TestAfterStep(t *testing.T) {
	t.Parallel()
	now := time.Unix(10000, 0)
	rule := restartRule{Condition: quadlet.RestartAlways, Backoff: time.Second}
	failing := instanceState{Message: "run container: boom", Retry: retryState{failures: 2}}
	missing := fmt.Errorf("run: %w", runtime.ErrHostPrerequisite)
	invalid := fmt.Errorf("build container spec: %w", runtime.ErrInvalidSpec)
	for _, tc := range []struct {
		name     string
		st       instanceState
		end      stepEnd
		verdict  stepVerdict
		wait     time.Duration
		restarts int
		failed   bool
		message  string
		// nodeRetry is the NodeRetry the state should show.
		nodeRetry bool
	}{
		{name: "a node failure after many waits at most nodeRetryCap", st: instanceState{Retry: retryState{failures: 12}},
			end: stepEnd{step: stepCreate, err: errors.New("network gone"), node: true}, verdict: verdictRetry, wait: nodeRetryCap,
			message: "network gone", nodeRetry: true},
		{name: "an instance failure after as many waits the full back-off", st: instanceState{Retry: retryState{failures: 12}},
			end: stepEnd{step: stepCreate, err: errors.New("boom")}, verdict: verdictRetry, wait: restartBackoffCap, message: "boom"},
		{name: "a missing program is the node's", st: instanceState{Retry: retryState{failures: 12}}, end: stepEnd{step: stepCreate, err: missing},
			verdict: verdictHostMissing, wait: nodeRetryCap, message: missing.Error(), nodeRetry: true},
		{name: "success clears NodeRetry", st: instanceState{NodeRetry: true, Retry: retryState{failures: 3}}, end: stepEnd{step: stepCreate},
			verdict: verdictDone},
		{name: "create done", st: failing, end: stepEnd{step: stepCreate}, verdict: verdictDone},
		{name: "removal done keeps the message", st: failing, end: stepEnd{step: stepRemove}, verdict: verdictDone,
			message: failing.Message},
		{name: "first start done", st: failing, end: stepEnd{step: stepStart}, verdict: verdictDone},
		{name: "restart counted", st: instanceState{Restarts: 1}, end: stepEnd{step: stepStart, restart: true},
			verdict: verdictRestarted, restarts: 2},
		{name: "failure backs off", st: failing, end: stepEnd{step: stepCreate, err: errors.New("boom")},
			verdict: verdictRetry, wait: 4 * time.Second, message: "boom"},
		{name: "missing program backs off", end: stepEnd{step: stepCreate, err: missing},
			verdict: verdictHostMissing, wait: time.Second, message: missing.Error(), nodeRetry: true},
		{name: "invalid spec fails", end: stepEnd{step: stepCreate, err: invalid},
			verdict: verdictInvalid, failed: true, message: invalid.Error()},
		{name: "stopped records nothing", st: failing, end: stepEnd{step: stepCreate, err: context.Canceled, stopped: true},
			verdict: verdictStopped, message: failing.Message},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, v, wait := afterStep(tc.st, rule, tc.end, now)
			if v != tc.verdict || wait != tc.wait || st.Restarts != tc.restarts || st.Failed != tc.failed || st.Message != tc.message ||
				st.NodeRetry != tc.nodeRetry {
				t.Fatalf("verdict %d wait %s state %+v; want verdict %d wait %s restarts %d failed %v message %q node retry %v",
					v, wait, st, tc.verdict, tc.wait, tc.restarts, tc.failed, tc.message, tc.nodeRetry)
			}
			if tc.wait > 0 && !st.Retry.At.Equal(now.Add(tc.wait)) {
				t.Fatalf("next attempt at %v, want %v", st.Retry.At, now.Add(tc.wait))
			}
			if v == verdictDone && st.Retry.failures != 0 {
				t.Fatalf("a step that succeeded kept %d failures for the back-off", st.Retry.failures)
			}
		})
	}
}
