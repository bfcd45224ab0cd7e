package leader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// placeOnce plans the assignments of the workloads keys (every workload and
// every assigned one when keys is nil) and writes the plan, then waits until
// the view holds the write, so the next pass never plans from a copy that
// lacks it.
func (l *Leader) placeOnce(ctx context.Context, keys []string) error {
	l.placementPasses.Add(1)
	if keys == nil {
		// Every workload, and those gone whose assignments remain.
		keys = append(l.view.desired.Keys(), l.view.assignedKeys()...)
		keys = append(keys, l.view.jobKeys()...)
		slices.Sort(keys)
		keys = slices.Compact(keys)
	}
	commits := map[string]string{}
	jobs := map[string]jobRecords{}
	rollouts := map[string]api.Rollout{}
	daemonRollouts := map[string]*api.DaemonRolloutRecord{}
	var current []api.Assignment
	for _, k := range keys {
		current = append(current, l.view.assignmentsOf(k)...)
		jobs[k] = l.view.jobsOf(k)
		if a, ok := l.view.appSource(k); ok {
			commits[k] = a.Commit
		}
		if ro, ok := l.view.rolloutOf(k); ok {
			rollouts[k] = ro
		}
		if r, ok := l.view.daemonRollout(k); ok {
			daemonRollouts[k] = r
		}
	}
	desired := l.view.workloadsOf(keys)
	l.planned.Add(int64(len(desired)))
	now := l.cfg.Now().UTC()
	nodes, draining := l.view.schedNodes(now)
	l.view.releaseFinishedJobs(nodes)
	plan := PlanAssignments(AssignInput{
		Nodes: nodes, Draining: draining, Departed: l.view.departedNodes(), Detachable: l.view.detachableNodes(), Desired: desired, Current: current, Reported: l.view.reportsOf(current),
		Commits: commits, SlotUsed: l.slotUsed, HeldIPs: l.view.heldIPs, Now: now, NewSuffix: l.cfg.NewSuffix, Rand: l.rng,
		DrainDelay: l.cfg.DrainDelay, Rollouts: rollouts, Jobs: jobs,
		DaemonRollouts: daemonRollouts, DaemonNodeDeadline: l.cfg.DaemonNodeDeadline, Secret: l.view.secret,
		Replace: l.cfg.Replace,
	})
	l.view.setScheduling(keys, plan.Scheduling)
	defer l.view.setWakes(keys, plan.Wake)
	if err := l.confirmAbsent(ctx, &plan); err != nil {
		return err
	}
	if err := l.writeDaemonRollouts(ctx, plan); err != nil {
		return err
	}
	// A record whose back-off moved is written before the assignments
	// that replace failed instances: a new leader never replaces one
	// sooner than the back-off allows.
	early, late := map[string]api.Rollout{}, map[string]api.Rollout{}
	for k, ro := range plan.Rollouts {
		prev, _ := l.view.rolloutOf(k)
		if replaceEqual(prev.Replace, ro.Replace) {
			late[k] = ro
		} else {
			early[k] = ro
		}
	}
	if err := l.writeRollouts(ctx, desired, early, nil); err != nil {
		return err
	}
	if len(plan.Put)+len(plan.Delete)+len(plan.Leave) > 0 {
		rev, err := l.cfg.Repo.WriteAssignments(ctx, append(plan.Leave, plan.Put...), plan.Delete)
		if errors.Is(err, resources.ErrAddressTaken) {
			// Another writer holds an address the view showed free: once the
			// view holds every address key there is, a pass over every
			// workload plans again.
			if kvs, lerr := l.cfg.Repo.Store().List(ctx, resources.IPAMPrefix()); lerr == nil {
				var last int64
				for _, kv := range kvs {
					last = max(last, kv.Version)
				}
				if werr := l.view.ipam.WaitRevision(ctx, last); werr == nil {
					l.view.markAll(factNodes)
				}
			}
		}
		if err != nil {
			return err
		}
		l.cfg.Logger.Info().Str("component", "placement").Int("added", len(plan.Put)).Int("leaving", len(plan.Leave)).
			Int("removed", len(plan.Delete)).Msg("assignments written")
		for _, a := range plan.Put {
			l.cfg.Logger.Debug().Str("component", "placement").Str("hop", "assignment-written").Str("workload", a.Namespace+"/"+a.Workload).
				Str("instance", a.InstanceID).Str("commit", a.SourceCommit).Msg("hop")
		}
		if err := l.view.assigns.WaitRevision(ctx, rev); err != nil {
			return err
		}
		l.replacedEvents(ctx, plan)
	}
	recordScheduling(plan)
	// A Job's records follow its assignments: a record never names an
	// instance that does not exist yet.
	if err := l.writeJobs(ctx, plan.Jobs); err != nil {
		return err
	}
	return l.writeRollouts(ctx, desired, late, plan.Rollbacks)
}

// replacedEvents records an event for each failed instance the plan
// replaced.
func (l *Leader) replacedEvents(ctx context.Context, plan AssignmentPlan) {
	if len(plan.Replaced) == 0 {
		return
	}
	events := make([]api.Event, 0, len(plan.Replaced))
	for _, a := range plan.Replaced {
		k := a.Namespace + "/" + a.Workload
		msg := fmt.Sprintf("instance %s failed on node %s and was replaced", a.InstanceID, a.Node)
		if ro, ok := plan.Rollouts[k]; ok && ro.Replace != nil {
			msg += fmt.Sprintf(" (attempt %d; next no sooner than %s)", ro.Replace.Attempts, ro.Replace.NextAt.Format(time.RFC3339))
			if ro.Replace.Reason != "" {
				msg += ": " + ro.Replace.Reason
			}
		}
		events = append(events, api.Event{Time: l.cfg.Now().UTC(), Type: api.EventWarning, Object: "workload/" + k,
			Reason: ReasonInstanceReplaced, Message: msg})
		l.cfg.Logger.Warn().Str("component", "placement").Str("workload", k).Str("instance", a.InstanceID).
			Str("node", a.Node).Msg("failed instance replaced")
	}
	if err := l.cfg.Repo.AppendEvents(ctx, events); err != nil {
		l.cfg.Logger.Warn().Err(err).Int("events", len(events)).Msg("cannot record the replaced instances' events")
	}
}

// writeDaemonRollouts writes the DaemonServices' node-by-node update
// records placement changed, before the assignments: a record is never
// behind the instances it placed, and a new leader carries on from it.
func (l *Leader) writeDaemonRollouts(ctx context.Context, plan AssignmentPlan) error {
	rev, err := l.cfg.Repo.WriteDaemonRollouts(ctx, plan.DaemonRollouts, plan.DropDaemonRollouts)
	if err != nil {
		return err
	}
	for _, r := range plan.DaemonRollouts {
		l.cfg.Logger.Info().Str("component", "placement").Str("workload", r.Namespace+"/"+r.Workload).
			Str("phase", r.Phase).Str("message", r.Message).Msg("daemon rollout")
	}
	if rev == 0 {
		return nil
	}
	return l.view.daemonRollouts.WaitRevision(ctx, rev)
}

// writeRollouts writes the rollout records placement changed, then makes
// the rollbacks it asked for, and waits until the view holds the records.
func (l *Leader) writeRollouts(ctx context.Context, desired []workload, rollouts map[string]api.Rollout, rollbacks []Rollback) error {
	if len(rollouts) == 0 && len(rollbacks) == 0 {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", "rollout").Logger()
	metaVersion := make(map[string]int64, len(desired))
	for _, w := range desired {
		metaVersion[w.Key()] = w.MetaVersion
	}
	writes := make([]resources.RolloutWrite, 0, len(rollouts))
	var events []api.Event
	for _, k := range slices.Sorted(maps.Keys(rollouts)) {
		ro := rollouts[k]
		ns, name := resources.SplitKey(k)
		writes = append(writes, resources.RolloutWrite{Namespace: ns, Name: name, Rollout: ro, MetaVersion: metaVersion[k]})
		prev, _ := l.view.rolloutOf(k)
		if out := ro.Outcomes[ro.Generation]; out != "" && (prev.Generation != ro.Generation || prev.Outcomes[ro.Generation] == "") {
			ev := api.Event{Time: ro.CompletedAt, Type: api.EventNormal, Object: "workload/" + k, Reason: "RolloutSucceeded",
				Message: fmt.Sprintf("generation %d rolled out", ro.Generation)}
			if out == api.OutcomeFailed && ro.Failure != nil {
				ev.Type, ev.Reason, ev.Message = api.EventWarning, "RolloutFailed", ro.Failure.Message
			}
			events = append(events, ev)
			log.Info().Str("workload", k).Int64("generation", ro.Generation).Str("outcome", out).
				Dur("took", ro.CompletedAt.Sub(ro.StartedAt)).Msg("rollout ended")
		}
	}
	// One write for the pass's events: a pass over thousands of new
	// workloads ends thousands of rollouts.
	if err := l.cfg.Repo.AppendEvents(ctx, events); err != nil {
		log.Warn().Err(err).Int("events", len(events)).Msg("cannot record the rollouts' events")
	}
	rev, err := l.cfg.Repo.WriteRollouts(ctx, writes)
	if err != nil {
		return err
	}
	if rev > 0 {
		if err := l.view.rollouts.WaitRevision(ctx, rev); err != nil {
			return err
		}
	}
	for _, rb := range rollbacks {
		ns, name := resources.SplitKey(rb.Key)
		res, _, err := l.cfg.Repo.RollbackWorkload(ctx, resources.RollbackRequest{Namespace: ns, Name: name,
			ToGeneration: rb.To, FromGeneration: rb.From, Auto: true})
		switch {
		case errors.Is(err, resources.ErrConflict) || errors.Is(err, resources.ErrNotFound):
			// A newer generation was applied, or the workload or the
			// archived generation is gone: nothing left to roll back.
			log.Warn().Err(err).Str("workload", rb.Key).Msg("automatic rollback not made")
		case err != nil:
			return fmt.Errorf("roll back %s: %w", rb.Key, err)
		default:
			log.Warn().Str("workload", rb.Key).Int64("from", rb.From).Int64("to", rb.To).
				Int64("generation", res.Meta.Generation).Msg("rolled back a failed rollout")
			ev := api.Event{Time: l.cfg.Now().UTC(), Type: api.EventWarning, Object: "workload/" + rb.Key, Reason: "RolledBack",
				Message: fmt.Sprintf("generation %d failed to roll out; generation %d's files applied again as generation %d",
					rb.From, rb.To, res.Meta.Generation)}
			if res.Meta.Owner.Kind == api.OwnerGit {
				ev.Message += "; Git management suspended until katcall resume"
			}
			if err := l.cfg.Repo.AppendEvent(ctx, ev); err != nil {
				log.Warn().Err(err).Str("workload", rb.Key).Msg("cannot record the rollback's event")
			}
		}
	}
	return nil
}

// writeJobs writes the Jobs' records of a plan, one transaction per Job,
// and waits until the view holds them. A write refused because a record
// moved on is an error: the pass is retried from the view.
func (l *Leader) writeJobs(ctx context.Context, jobs []JobWrite) error {
	var rev int64
	for _, j := range jobs {
		if len(j.Runs) == 0 && j.Schedule == nil {
			continue
		}
		var sched []resources.JobScheduleWrite
		if j.Schedule != nil {
			sched = append(sched, *j.Schedule)
		}
		ok, r, err := l.cfg.Repo.WriteJobRuns(ctx, j.Runs, sched, map[string]int64{j.Namespace + "/" + j.Name: j.MetaVersion})
		if err != nil {
			return fmt.Errorf("job %s/%s: %w", j.Namespace, j.Name, err)
		}
		if !ok {
			return fmt.Errorf("job %s/%s: records moved on since the pass read them", j.Namespace, j.Name)
		}
		rev = max(rev, r)
		for _, rw := range j.Runs {
			if rw.Version == 0 || rw.Delete {
				l.cfg.Logger.Info().Str("component", "jobs").Str("workload", j.Namespace+"/"+j.Name).Str("run", rw.Run.Run).
					Bool("deleted", rw.Delete).Msg(map[bool]string{true: "run deleted", false: "run started"}[rw.Delete])
			} else if rw.Run.Finished() {
				l.cfg.Logger.Info().Str("component", "jobs").Str("workload", j.Namespace+"/"+j.Name).Str("run", rw.Run.Run).
					Str("state", rw.Run.State).Str("reason", rw.Run.Reason).Msg("run finished")
			}
		}
	}
	if rev == 0 {
		return nil
	}
	return l.view.jobs.WaitRevision(ctx, rev)
}

// confirmAbsent drops from plan the part of each Job whose MustBeAbsent keys
// are not all absent from etcd, and of each Orphaned workload that etcd
// has: the view was behind, and the change that brings it up to date wakes
// the pass again.
func (l *Leader) confirmAbsent(ctx context.Context, plan *AssignmentPlan) error {
	for _, k := range plan.Orphaned {
		ns, name, _ := strings.Cut(k, "/")
		_, err := l.cfg.Repo.Store().Get(ctx, resources.MetaKey(ns, name))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("workload %s: read its desired state: %w", k, err)
		}
		plan.dropWorkload(ns, name)
	}
	for _, j := range slices.Clone(plan.Jobs) {
		for _, key := range j.MustBeAbsent {
			_, err := l.cfg.Repo.Store().Get(ctx, key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("job %s/%s: read %s: %w", j.Namespace, j.Name, key, err)
			}
			plan.dropWorkload(j.Namespace, j.Name)
			break
		}
	}
	return nil
}

// recordScheduling counts a written plan's scheduling attempts: every
// instance placed, and every one that fit on no node by its cause.
func recordScheduling(plan AssignmentPlan) {
	if len(plan.Put) > 0 {
		metrics.Scheduled(metrics.ScheduleScheduled, "", len(plan.Put))
	}
	for _, st := range plan.Scheduling {
		if st.Unplaced > 0 {
			metrics.Scheduled(metrics.ScheduleUnschedulable, st.Cause, st.Unplaced)
		}
	}
}

// slotUsed reports whether an assignment holds user-namespace slot s, or
// Config.HeldSlots has it.
func (l *Leader) slotUsed(s int) bool {
	return l.view.slotUsed(s) || slices.Contains(l.cfg.HeldSlots, s)
}
