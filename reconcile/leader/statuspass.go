package leader

import (
	"context"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// statusChunk is how many derived statuses a status pass writes at once.
const statusChunk = 500

// statusOnce derives the status of the workloads keys (every workload when
// keys is nil) from the view's facts and writes those that changed, several
// to a transaction. It is the only writer of workload statuses. A pass over
// every workload also forgets the specs no workload uses any more.
func (l *Leader) statusOnce(ctx context.Context, keys []string) error {
	l.statusPasses.Add(1)
	full := keys == nil
	if full {
		keys = l.view.desired.Keys()
	}
	now := l.cfg.Now().UTC()
	inUse := map[string]bool{}
	var writes []resources.StatusWrite
	var events []api.Event
	var last int64 // the revision of the last write
	flush := func() error {
		if len(writes) == 0 {
			return nil
		}
		// A write refused because the meta moved on is followed by the
		// meta's watch event, which marks the workload dirty again.
		_, rev, err := l.cfg.Repo.WriteWorkloadStatuses(ctx, writes)
		if err != nil {
			return fmt.Errorf("write workload statuses: %w", err)
		}
		last, writes = max(last, rev), writes[:0]
		return nil
	}
	for _, k := range keys {
		w, ok := l.view.workload(k)
		if !ok || w.Spec == nil {
			continue // gone (its status went with it), or its files do not match its meta
		}
		inUse[w.Meta.SpecHash] = true
		if _, known := l.view.schedulingOf(k); !known && w.Meta.Type == quadlet.TypeDaemonService {
			// A DaemonService's desired count is placement's (one per
			// eligible node): until its first pass of this term, the
			// stored status stands rather than a guess of one.
			continue
		}
		l.derived.Add(1)
		prev := l.view.storedStatus(k)
		st := DeriveWorkloadStatus(l.view.factsOf(w), prev.status, now)
		if prev.version != 0 && statusEqual(st, prev.status) {
			continue
		}
		writes = append(writes, resources.StatusWrite{Namespace: w.Meta.Namespace, Name: w.Meta.Name, Status: st,
			MetaVersion: w.MetaVersion, StatusVersion: prev.version})
		if st.RetryReason != "" && st.RetryReason != prev.status.RetryReason && st.NextRetryTime != nil {
			if c := condition(st, ConditionReconciling); c != nil && c.Reason == ReasonPlacementFailed {
				events = append(events, api.Event{Time: now, Type: api.EventWarning, Object: "workload/" + k, Reason: ReasonPlacementFailed,
					Message: c.Message})
			} else {
				// A failed instance now waits out the back-off.
				events = append(events, api.Event{Time: now, Type: api.EventWarning, Object: "workload/" + k, Reason: ReasonInstanceFailed,
					Message: fmt.Sprintf("%s; replaced no sooner than %s", st.RetryReason, st.NextRetryTime.UTC().Format(time.RFC3339))})
			}
		}
		// A pass over thousands writes as it goes: it never holds more
		// than statusChunk statuses at once.
		if len(writes) == statusChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if len(events) > 0 {
		if err := l.cfg.Repo.AppendEvents(ctx, events); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn().Err(err).Int("events", len(events)).Msg("cannot record the failed instances' events")
		}
	}
	if full {
		l.view.specs.keepOnly(inUse)
	}
	if last == 0 {
		return nil
	}
	return l.view.statuses.WaitRevision(ctx, last)
}

// factsOf assembles the facts of one workload from the view; the reports
// of instances on nodes that are not Ready are left out.
func (v *view) factsOf(w workload) WorkloadFacts {
	k := w.Key()
	as := v.assignmentsOf(k)
	wf := WorkloadFacts{
		Meta: w.Meta, Desired: w.Spec.Desired, FromGit: w.Spec.Git != nil, Assigned: as, Reported: v.reportsOf(as),
		TemplateHash: templateWithSecrets(w, "", v.secret),
	}
	// A NotReady node's last reports say nothing of now.
	now := v.now()
	for _, a := range as {
		if _, ok := wf.Reported[a.InstanceID]; ok && !v.nodeReady(a.Node, now) {
			delete(wf.Reported, a.InstanceID)
		}
	}
	if w.Meta.Type == quadlet.TypeJob && w.Spec.Job != nil {
		rec := v.jobsOf(k)
		wf.Job = &JobFacts{Schedule: w.Spec.Schedule, Last: rec.schedule.sched.LastScheduleTime}
		for _, sr := range rec.runs {
			wf.Job.Runs = append(wf.Job.Runs, sr.run)
		}
	}
	if ro, ok := v.rolloutOf(k); ok {
		wf.Rollout = &ro
	}
	if pf, ok := v.placementFailureOf(k); ok {
		wf.Placement = &pf
	}
	if r, ok := v.ingress.Get(resources.IngressRoutesKey(w.Meta.Namespace, w.Meta.Name)); ok {
		wf.IngressConflicts = r.Conflicts
	}
	if sc, ok := v.schedulingOf(k); ok {
		wf.Unplaced, wf.UnplacedReason = sc.Unplaced, sc.Reason
		if w.Meta.Type == quadlet.TypeDaemonService {
			wf.Desired = sc.Desired // one per eligible node
		}
	}
	if wf.FromGit {
		if a, ok := v.appSource(k); ok {
			wf.App = &a
			wf.TemplateHash = templateWithSecrets(w, a.Commit, v.secret)
			if a.Commit != "" {
				wf.Builds = v.buildsOf(k, a.Commit)
			}
		}
	}
	if o := w.Meta.Owner; o.Kind == api.OwnerGit {
		if pe, ok := v.pathError(o.Source, o.Path); ok {
			wf.PathError = &pe
		}
	}
	return wf
}
