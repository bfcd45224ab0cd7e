package agent

import (
	"context"
	"errors"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// loadAssignments reads the node's assignments into the table, parsing the
// spec of each new one; an assignment whose spec does not parse is logged
// and left out.
func (ag *Agent) loadAssignments(ctx context.Context) error {
	as, err := ag.cfg.Repo.ListAssignments(ctx, ag.cfg.Node)
	if err != nil {
		return err
	}
	ag.table.assign(as, func(a api.Assignment) (assignedInstance, bool) {
		q, err := quadlet.ParseWorkload(a.Files, quadlet.ParseOptions{DefaultNamespace: a.Namespace})
		if err != nil {
			ag.cfg.Logger.Error().Err(err).Str("instance", a.InstanceID).Msg("assignment holds an invalid spec; ignoring it")
			return assignedInstance{}, false
		}
		hop(ag.cfg.Logger, "agent-saw", a)
		return assignedInstance{a: a, q: q, rule: ruleOf(q, ag.cfg.RestartBackoff)}, true
	})
	return nil
}

// seedState restores restart counts from the status this node reported
// last, so an agent restart does not reset them.
func (ag *Agent) seedState(ctx context.Context) {
	prev, err := ag.cfg.Repo.GetNodeStatus(ctx, ag.cfg.Node)
	if err != nil {
		if !errors.Is(err, resources.ErrNotFound) {
			ag.cfg.Logger.Warn().Err(err).Msg("cannot read the last reported status; restart counts start at 0")
		}
		return
	}
	ag.table.seed(seededStates(prev.WorkloadInstances))
}

// seededStates is the state of each instance a report of this node
// showed, as a new agent starts from: its restart counts, whether it had
// finished, and its verify verdict, which a command that runs once must
// keep. It is pure.
func seededStates(reported []api.InstanceStatus) map[string]instanceState {
	out := make(map[string]instanceState, len(reported))
	for _, is := range reported {
		st := instanceState{Restarts: is.Restarts, WindowRestarts: is.WindowRestarts, WindowStart: is.RestartWindowStart,
			finishedBefore: is.Phase == api.InstanceSucceeded || is.Phase == api.InstanceFailed}
		if is.Verification == api.VerifyPassed || is.Verification == api.VerifyFailed {
			st.Verify = verifyState{Status: is.Verification, Message: is.VerifyMessage} // the command runs once
		}
		out[is.InstanceID] = st
	}
	return out
}
