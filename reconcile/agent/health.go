package agent

import (
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
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
