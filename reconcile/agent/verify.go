package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
)

// verifyOutputTail is how much of a failed verify command's output its
// report keeps.
const verifyOutputTail = 256

// verifyState is the verification of one instance (updateStrategy.verify
// of a DaemonService): Status is "" until the command ran, then
// api.VerifyPassed or api.VerifyFailed for good.
type verifyState struct {
	Status  string
	Message string
}

// verifyOf returns the verify command of an instance's spec; nil without
// one.
func verifyOf(q *quadlet.Quadlet) *quadlet.VerifyCommand {
	if q == nil || q.Workload.Spec.UpdateStrategy == nil {
		return nil
	}
	return q.Workload.Spec.UpdateStrategy.Verify
}

// verifyDue reports whether an instance's verify command should run now:
// it has one, has not run it, and the instance is ready (running, and
// healthy when it has a health check). It is pure.
func verifyDue(v *quadlet.VerifyCommand, st verifyState, ready bool) bool {
	return v != nil && st.Status == "" && ready
}

// verifyResult is the verdict of one run of the verify command. It is
// pure.
func verifyResult(res runtime.ExecResult, err error, timeout time.Duration) verifyState {
	switch {
	case errors.Is(err, runtime.ErrExecTimeout):
		return verifyState{Status: api.VerifyFailed, Message: fmt.Sprintf("still running after %s: killed", timeout)}
	case err != nil:
		return verifyState{Status: api.VerifyFailed, Message: "run: " + err.Error()}
	case res.ExitCode != 0:
		out := strings.TrimSpace(string(res.Output))
		if len(out) > verifyOutputTail {
			out = "..." + out[len(out)-verifyOutputTail:]
		}
		return verifyState{Status: api.VerifyFailed, Message: fmt.Sprintf("exit %d: %s", res.ExitCode, out)}
	}
	return verifyState{Status: api.VerifyPassed}
}

// verify runs instance id's verify command in its container (in the health
// checks' pool) and records the verdict, once.
func (ag *Agent) verify(ctx context.Context, id, containerID string, v *quadlet.VerifyCommand) {
	timeout := time.Duration(max(v.TimeoutSeconds, 1)) * time.Second
	var st verifyState
	select {
	case ag.probes <- struct{}{}:
		res, err := ag.cfg.Runtime.Exec(ctx, containerID, v.Command, timeout)
		<-ag.probes
		st = verifyResult(res, err, timeout)
	case <-ctx.Done():
	}
	if ag.table.endVerify(id, st, ctx.Err() == nil) {
		ag.cfg.Logger.Info().Str("instance", id).Str("verification", st.Status).Str("message", st.Message).Msg("verify command ran")
	}
	ag.notifyIfChanged()
	reconcile.Poke(ag.wake)
}
