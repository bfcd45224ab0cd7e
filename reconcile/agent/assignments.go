package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// followAssignments keeps a cache of the node's assignments current until
// ctx ends: listed once, then each change decoded and parsed as it comes,
// so a change costs the agent that one assignment, not a read of them all.
// Each change marks the assignments dirty and wakes a pass. A cache that
// cannot start, or whose watch ends, is replaced after the resync interval.
func (ag *Agent) followAssignments(ctx context.Context) {
	for {
		c := store.NewCache(ag.cfg.Repo.Store(), resources.NodeAssignmentsPrefix(ag.cfg.Node), ag.decodeAssignment)
		ag.assignments.Store(c)
		err := ag.runAssignmentCache(ctx, c)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("its watch ended")
		}
		ag.cfg.Logger.Warn().Err(err).Dur("retry_in", ag.cfg.Resync).Msg("cannot follow the node's assignments")
		select {
		case <-ctx.Done():
			return
		case <-time.After(ag.cfg.Resync):
		}
	}
}

// runAssignmentCache runs c until ctx ends or its watch does, asking for a
// pass once it holds its first listing (a node without assignments has no
// key to tell it) and after every change.
func (ag *Agent) runAssignmentCache(ctx context.Context, c *store.Cache[assignedInstance]) error {
	changed := func() {
		ag.assignmentsDirty.Store(true)
		reconcile.Poke(ag.wake)
	}
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-c.Synced():
			changed()
		case <-cctx.Done():
		}
	}()
	return c.Run(ctx, func(string) { changed() })
}

// decodeAssignment decodes one assignment record and parses its spec, as the
// cache of followAssignments reads it; an assignment that does not decode or
// whose spec does not parse is logged and left out.
func (ag *Agent) decodeAssignment(kv store.KV) (assignedInstance, bool) {
	a, err := resources.DecodeAssignment(kv.Value)
	if err != nil {
		ag.cfg.Logger.Error().Err(err).Str("key", kv.Key).Msg("assignment does not decode; ignoring it")
		return assignedInstance{}, false
	}
	q, err := quadlet.ParseWorkload(a.Files, quadlet.ParseOptions{DefaultNamespace: a.Namespace})
	if err != nil {
		ag.cfg.Logger.Error().Err(err).Str("instance", a.InstanceID).Msg("assignment holds an invalid spec; ignoring it")
		return assignedInstance{}, false
	}
	hop(ag.cfg.Logger, "agent-saw", a)
	return assignedInstance{a: a, q: q, rule: ruleOf(q, ag.cfg.RestartBackoff)}, true
}

// loadAssignments makes the cache's assignments the table's. It reports
// false, changing nothing, until the cache holds its first listing: a pass
// must not take a node without assignments for one whose instances are
// all unassigned.
func (ag *Agent) loadAssignments() bool {
	items, ok := ag.syncedAssignments()
	if !ok {
		return false
	}
	byID := make(map[string]assignedInstance, len(items))
	as := make([]api.Assignment, 0, len(items))
	for _, ai := range items {
		byID[ai.a.InstanceID] = ai
		as = append(as, ai.a)
	}
	ag.table.assign(as, func(a api.Assignment) (assignedInstance, bool) {
		ai, ok := byID[a.InstanceID]
		return ai, ok
	})
	return true
}

// seedTimeout bounds seedState's read: the heartbeat waits for it.
const seedTimeout = 30 * time.Second

// seedState restores restart counts from the status this node reported
// last, so an agent restart does not reset them.
func (ag *Agent) seedState(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
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

// Assignments returns the node's assignments as the agent last saw them
// (its watch-fed cache), nil before its first listing. A node that
// detaches seeds its own control plane with them (docs/detached.md): they
// are what it runs, and its cluster cannot be asked any more.
func (ag *Agent) Assignments() []api.Assignment {
	items, ok := ag.syncedAssignments()
	if !ok {
		return nil
	}
	out := make([]api.Assignment, 0, len(items))
	for _, ai := range items {
		out = append(out, ai.a)
	}
	return out
}

// syncedAssignments returns the cache's assignments, and false until the
// cache holds its first listing.
func (ag *Agent) syncedAssignments() (map[string]assignedInstance, bool) {
	c := ag.assignments.Load()
	if c == nil {
		return nil, false
	}
	select {
	case <-c.Synced():
	default:
		return nil, false
	}
	items, _ := c.Snapshot()
	return items, true
}
