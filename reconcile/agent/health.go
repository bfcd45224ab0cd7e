package agent

import (
	"context"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
)

// healthState is the health-check progress of one running container.
type healthState struct {
	// container is the ID of the container being checked: a new container
	// starts over, and so does a restart of the same one (restarted resets
	// the state). Not its StartedAt: the time a step recorded and the time
	// Podman lists differ, and a run must not look new when the listing
	// replaces the step's record.
	container string
	// Status is "" before any result, then HealthHealthy or
	// HealthUnhealthy.
	Status    string
	successes int
	failures  int
	// next is when the next check is due.
	next time.Time
}

// probeDue reports whether a health check should run now for container
// (started at startedAt), and returns the state reset for a new container.
// It is pure.
func probeDue(h healthState, hc *quadlet.HealthCheck, container string, startedAt, now time.Time) (bool, healthState) {
	if hc == nil || startedAt.IsZero() {
		return false, h
	}
	if h.container != container {
		h = healthState{container: container, next: startedAt.Add(time.Duration(hc.InitialDelaySeconds) * time.Second)}
	}
	return !now.Before(h.next), h
}

// probeResult folds one check's outcome into h and schedules the next check
// PeriodSeconds after now. Status changes only once SuccessThreshold
// successes or FailureThreshold failures have been seen in a row. It is pure.
func probeResult(h healthState, hc *quadlet.HealthCheck, ok bool, now time.Time) healthState {
	if ok {
		h.successes++
		h.failures = 0
		if h.successes >= max(hc.SuccessThreshold, 1) {
			h.Status = api.HealthHealthy
		}
	} else {
		h.failures++
		h.successes = 0
		if h.failures >= max(hc.FailureThreshold, 1) {
			h.Status = api.HealthUnhealthy
		}
	}
	h.next = now.Add(time.Duration(max(hc.PeriodSeconds, 1)) * time.Second)
	return h
}

// healthCheckOf returns the health check of an instance's spec; nil without
// one.
func healthCheckOf(q *quadlet.Quadlet) *quadlet.HealthCheck {
	if q == nil || q.LoadBalancer == nil {
		return nil
	}
	return q.LoadBalancer.Spec.HealthCheck
}

// execStartAllowance is added to a health check's timeoutSeconds: the
// time Podman takes to start a command in a container (a few hundred
// milliseconds idle, seconds on a busy node) is not the check's.
const execStartAllowance = 2 * time.Second

// probe runs one health check of instance id in its container (in the
// health checks' pool) and records its result.
func (ag *Agent) probe(ctx context.Context, id, containerID string, hc *quadlet.HealthCheck) {
	ok := false
	select {
	case ag.probes <- struct{}{}:
		res, err := ag.cfg.Runtime.Exec(ctx, containerID, hc.Exec.Command, time.Duration(max(hc.TimeoutSeconds, 1))*time.Second+execStartAllowance)
		<-ag.probes
		ok = err == nil && res.ExitCode == 0
	case <-ctx.Done():
	}
	if healthy, a := ag.table.endProbe(id, containerID, hc, ok, ctx.Err() == nil, ag.cfg.Now()); healthy {
		hop(ag.cfg.Logger, "healthy", a)
	}
	reconcile.Poke(ag.wake)
}
