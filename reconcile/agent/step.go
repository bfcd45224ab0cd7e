package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
)

// stepTimeout bounds one step (a pull, create and start, or a restart).
const stepTimeout = 5 * time.Minute

// runStep carries out the step the table chose for an instance (t.kind is
// taskStep) and records its outcome, and what it left the container as, at
// once: no step waits for a listing of the node. It is the one place a
// step is run.
func (ag *Agent) runStep(ctx context.Context, t task) {
	id, step, ai, c := t.id, t.step, t.ai, t.c
	log := ag.cfg.Logger.With().Str("instance", id).Str("step", step.String()).Logger()
	began := ag.cfg.Now()
	var err error
	if step == stepCreate && ai.a.Build != nil {
		// Builds run outside the runtime slots (the Builder bounds its
		// own), so a long build never holds up listings, health checks
		// and other instances' steps.
		bctx, bcancel := context.WithTimeout(ctx, buildStepTimeout)
		err = ag.buildImage(bctx, ai)
		bcancel()
	}
	var after *runtime.ContainerStatus
	known := false
	if err == nil {
		after, known, err = ag.runtimeStep(ctx, step, ai, c)
	}
	switch {
	case err == nil && step == stepRemove:
		hop(ag.cfg.Logger, "old-stopped", ai.a)
		ag.runs.forget(id)
		ag.pruneAfter(ctx, c)
	case err == nil && step == stepStart && c != nil && !c.StartedAt.IsZero():
		ag.runs.restarted(id, *c, began)
	case err == nil && step == stepCreate:
		hop(ag.cfg.Logger, "running", ai.a)
	}
	if step == stepCreate && ai.a.Build != nil && ag.cfg.Builder != nil {
		// The container started (or failed to): the build's follow-up
		// work no longer competes with it.
		ag.cfg.Builder.Release(ai.a.Namespace, ai.a.Workload, ai.a.Build.Commit)
	}
	end := stepEnd{step: step, restart: step == stepStart && !c.StartedAt.IsZero(), err: err,
		stopped: errors.Is(ctx.Err(), context.Canceled), node: ag.nodeCause(err)}
	st, verdict, wait := ag.table.endStep(id, ai.rule, end, after, known, ag.cfg.Now())
	switch verdict {
	case verdictRestarted:
		log.Info().Int("restarts", st.Restarts).Msg("restarted container")
	case verdictDone:
		log.Info().Msg("done")
	case verdictHostMissing:
		// Not the instance's fault: retried (with back-off) until the
		// program is installed; the node's RuntimeReady says what.
		ag.hostDirty.Store(true)
		log.Error().Err(err).Dur("retry_in", wait).Msg("step failed: a program the runtime needs is missing")
	case verdictInvalid:
		log.Error().Err(err).Msg("invalid container spec: the instance fails")
	case verdictRetry:
		log.Warn().Err(err).Dur("retry_in", wait).Bool("node_cause", end.node).Msg("step failed")
	}
	if !known && ctx.Err() == nil {
		// A failed step left the container in a state only a listing
		// tells; until it comes, the instance keeps its last known one.
		reconcile.Poke(ag.listNow)
	}
	ag.notifyIfChanged()
	reconcile.Poke(ag.wake)
}

// runtimeStep carries out the runtime calls of one step: a run or a start
// holds one of the step slots, a removal one of the removal pool, so a
// container's stop grace never holds up another's start. It returns what the
// step left the container as (nil: removed) when it knows.
//
// A container the step started is known to run from the moment podman
// returns, and that moment stands for its start time: only a health check
// needs the exact one (it tells one run from the next), so only a workload
// with a health check pays for an inspect, after the slot is free. The next
// listing brings the exact time either way.
func (ag *Agent) runtimeStep(ctx context.Context, step stepKind, ai assignedInstance, c *runtime.ContainerStatus) (*runtime.ContainerStatus, bool, error) {
	// A hung runtime call must not hold the instance forever.
	timeout := stepTimeout
	if step == stepRemove {
		timeout += ag.stopGrace(ai, c)
	}
	// A runtime call under way finishes even when the agent stops (Run
	// waits for it): a podman run killed half way leaves a container
	// Podman no longer lists but runc still runs, and a removal killed
	// half way one Podman shows "stopping" for good. Only a step still
	// waiting for its slot gives up.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	after, err := ag.slotStep(ctx, callCtx, step, ai, c)
	if err != nil || after == nil || healthCheckOf(ai.q) == nil {
		return after, err == nil, err
	}
	ag.table.recordStepped(ai.a.InstanceID, after) // it runs: tell at once
	ag.notifyIfChanged()
	inspected, err := ag.cfg.Runtime.InspectContainer(callCtx, after.ID)
	if err != nil {
		return nil, false, nil // it ran; a listing tells the rest
	}
	return inspected, true, nil
}

// slotStep makes the runtime call of one step, under callCtx, in its
// pool's slot, unless the agent stops (ctx ends) first; it returns what the
// call left the container as: nil when removed, else running since now.
func (ag *Agent) slotStep(ctx, callCtx context.Context, step stepKind, ai assignedInstance, c *runtime.ContainerStatus) (*runtime.ContainerStatus, error) {
	pool := ag.slots
	if step == stepRemove {
		pool = ag.removals
	}
	select {
	case pool <- struct{}{}:
		defer func() { <-pool }()
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-callCtx.Done():
		return nil, callCtx.Err()
	}
	switch step {
	case stepCreate:
		hop(ag.cfg.Logger, "run-start", ai.a)
		id, spec, err := ag.create(callCtx, ai)
		if err != nil {
			return nil, err
		}
		return &runtime.ContainerStatus{ID: id, Name: spec.Name, Image: spec.Image, Labels: spec.Labels,
			State: runtime.StateRunning, Ports: spec.Ports, StartedAt: ag.cfg.Now()}, nil
	case stepStart:
		if err := ag.cfg.Runtime.StartContainer(callCtx, c.ID); err != nil {
			if ag.dropPortClash(callCtx, ai, c.ID, c.Ports, err) {
				return nil, fmt.Errorf("%w (removed: the next try picks other host ports)", err)
			}
			return nil, err
		}
		after := *c
		after.State, after.ExitCode, after.StartedAt, after.FinishedAt = runtime.StateRunning, 0, ag.cfg.Now(), time.Time{}
		return &after, nil
	default:
		return nil, ag.remove(callCtx, ai, c)
	}
}

// remove stops and removes an instance's container, leaving no process of
// it. A container whose stop was cut short (Podman shows it "stopping": an
// agent stopped or killed in the middle of a removal, before the removal
// ran apart from the agent) is stopped again first, with its whole grace:
// Podman 4.3 removes such a container without stopping it, and its
// processes would run on unseen, holding its ports and its address.
func (ag *Agent) remove(ctx context.Context, ai assignedInstance, c *runtime.ContainerStatus) error {
	grace := ag.stopGrace(ai, c)
	if c.Stopping() {
		if err := ag.cfg.Runtime.StopContainer(ctx, c.ID, grace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("stop the container whose stop was cut short: %w", err)
		}
	}
	err := ag.cfg.Runtime.StopAndRemoveContainer(ctx, c.ID, grace)
	if err == nil || errors.Is(err, runtime.ErrKilledLeftovers) {
		if ferr := ag.secrets.forget(c.Labels[runtime.LabelInstance]); ferr != nil {
			ag.cfg.Logger.Warn().Err(ferr).Str("instance", c.Labels[runtime.LabelInstance]).Msg("remove the secrets of a removed container")
		}
	}
	if errors.Is(err, runtime.ErrKilledLeftovers) {
		// Removed, and nothing of it runs: said, not failed.
		ag.cfg.Logger.Warn().Err(err).Str("instance", c.Labels[runtime.LabelInstance]).Str("container", c.ID).
			Msg("the runtime left processes of the removed container running; they were killed")
		return nil
	}
	return err
}

// stopGrace is how long a container gets between the stop signal and the
// kill: its workload's spec.container.stopGracePeriodSeconds, else the
// agent's StopGrace.
func (ag *Agent) stopGrace(ai assignedInstance, c *runtime.ContainerStatus) time.Duration {
	if ai.q != nil {
		if g := ai.q.Workload.Spec.Container.StopGracePeriodSeconds; g != nil {
			return time.Duration(*g) * time.Second
		}
		return ag.cfg.StopGrace
	}
	if c != nil { // an instance no longer assigned: what it was created with
		if g, err := strconv.Atoi(c.Labels[runtime.LabelStopGrace]); err == nil && g >= 0 {
			return time.Duration(g) * time.Second
		}
	}
	return ag.cfg.StopGrace
}
