package agent

import (
	"context"
	"errors"
	"sync"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
)

// runtimeHealth is what the agent knows of its container runtime: why the
// last listing failed, and what the host check found missing. The node's
// RuntimeReady condition is derived from it. It is safe for concurrent use.
type runtimeHealth struct {
	mu sync.Mutex
	// listErr is the last listing's error.
	listErr error
	// hostErr is CheckHost's last error.
	hostErr error
}

// listed records the outcome of a listing; repeated is true when it failed
// as the one before did.
func (h *runtimeHealth) listed(err error) (repeated bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	repeated = err != nil && h.listErr != nil && err.Error() == h.listErr.Error()
	h.listErr = err
	return repeated
}

// checked records the host check's verdict and returns the one before.
func (h *runtimeHealth) checked(err error) (was error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	was, h.hostErr = h.hostErr, err
	return was
}

// listFailing reports whether the last listing of the containers failed:
// the runtime cannot be used.
func (h *runtimeHealth) listFailing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.listErr != nil
}

// hostFailing reports whether the last host check failed.
func (h *runtimeHealth) hostFailing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hostErr != nil
}

// conditions is the node's RuntimeReady condition: false while the runtime
// cannot list containers, or the host lacks what it needs.
func (h *runtimeHealth) conditions() []api.Condition {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := api.Condition{Type: "RuntimeReady", Status: api.ConditionTrue, Reason: "RuntimeAvailable"}
	switch {
	case h.listErr != nil:
		c.Status, c.Reason, c.Message = api.ConditionFalse, "RuntimeUnavailable", h.listErr.Error()
	case h.hostErr != nil:
		c.Status, c.Reason, c.Message = api.ConditionFalse, "HostPrerequisiteMissing", h.hostErr.Error()
	}
	return []api.Condition{c}
}

// Conditions reports the node conditions the agent knows: RuntimeReady,
// false while the container runtime cannot be used.
func (ag *Agent) Conditions() []api.Condition { return ag.health.conditions() }

// checkHost runs CheckHost when asked to, and records its verdict.
func (ag *Agent) checkHost(ctx context.Context) {
	if ag.cfg.CheckHost == nil || !ag.hostDirty.Swap(false) {
		return
	}
	err := ag.cfg.CheckHost(ctx)
	if ctx.Err() != nil {
		return
	}
	was := ag.health.checked(err)
	switch {
	case err != nil && (was == nil || was.Error() != err.Error()):
		ag.cfg.Logger.Error().Err(err).Msg("this node cannot run containers until what is missing is installed")
	case err == nil && was != nil:
		ag.cfg.Logger.Info().Msg("the container runtime's prerequisites are installed now")
		ag.nodeRecovered("the container runtime's prerequisites are installed")
	}
	if (err == nil) != (was == nil) {
		ag.cfg.OnChange()
	}
}

// nodeCause reports whether a step's error err has a cause of the node
// rather than of the instance: the node's network not made, the runtime's
// service unreachable, a program the runtime needs missing, the node's
// Podman network gone, or a runtime that cannot list containers either.
// Such a step is retried within nodeRetryCap (afterStep).
func (ag *Agent) nodeCause(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrNetworkNotReady), errors.Is(err, runtime.ErrServiceUnavailable),
		errors.Is(err, runtime.ErrHostPrerequisite), errors.Is(err, runtime.ErrNetworkNotFound):
		return true
	}
	return ag.health.listFailing()
}

// nodeRecovered makes every instance waiting to retry a failed step due at
// once, and wakes a pass: the node was seen to recover (why says how), and
// the failure may have been its. An instance whose own fault it was fails
// again and backs off further.
func (ag *Agent) nodeRecovered(why string) {
	if n := ag.table.retryFailedNow(ag.cfg.Now()); n > 0 {
		ag.cfg.Logger.Info().Int("instances", n).Str("because", why).Msg("retrying failed steps at once")
	}
	reconcile.Poke(ag.wake)
}
