package leader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// DefaultResync is Config.Resync's default.
const DefaultResync = 30 * time.Second

// DefaultDrainDelay is kat-agent's default for Config.DrainDelay.
const DefaultDrainDelay = 2 * time.Second

// Config holds the dependencies of a term's leader loops.
type Config struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// NodeLossTimeout is how old a node's last heartbeat may be before the
	// node is NotReady and its instances are replaced (cluster.kat's
	// nodeLossTimeoutSeconds). Default quadlet.DefaultNodeLossTimeoutSeconds.
	NodeLossTimeout time.Duration
	// AppInterval is how often app repositories are resolved again without
	// a webhook. Default gitsync.DefaultIntervalSeconds.
	AppInterval time.Duration
	// AppAuth names the app repositories' credential files. Default none.
	AppAuth api.GitAuth
	// Resolve resolves an app repository's ref; default gitsync.ResolveRef
	// with AppAuth. Tests replace it.
	Resolve func(ctx context.Context, g quadlet.GitSource) (string, error)
	// Resync is the period of a pass over every workload, changed or not.
	// Default DefaultResync.
	Resync time.Duration
	// Desired is the term's index of the desired state, shared with the Git
	// sources; the caller runs it. Default: the view makes and runs its own.
	Desired *resources.DesiredIndex
	// DaemonNodeDeadline is how long one node of a DaemonService's
	// node-by-node update may take to be verified before it fails.
	// Default DefaultDaemonNodeDeadline.
	DaemonNodeDeadline time.Duration
	// ClusterDomain is cluster.kat's clusterDomain, under which the
	// records loop writes DNS records. Default quadlet.DefaultClusterDomain.
	ClusterDomain string
	// DrainDelay is how long an instance about to stop stays out of every
	// list of ready instances (workload status, DNS) before its assignment
	// is deleted and its agent stops it, so clients following the lists
	// see no failed request. 0 stops instances at once; kat-agent's
	// --drain-delay defaults to DefaultDrainDelay.
	DrainDelay time.Duration
	// Now and NewSuffix replace time.Now and RandomSuffix, for tests.
	Now       func() time.Time
	NewSuffix func() string
	Logger    zerolog.Logger
}

// Leader is one term's leader loops over one view of the cluster state:
// placement, workload status and app sources. Make a new one for every term
// (reconcile.Leadership does, through the node's Term), so every term starts
// from etcd.
type Leader struct {
	cfg  Config
	view *view
	apps *AppSources
	dns  *dnsRecords
	// passes counts the passes of each loop, and planned and derived the
	// workloads placement planned and statuses the status loop derived, for
	// tests and benchmarks.
	placementPasses, statusPasses atomic.Int64
	planned, derived              atomic.Int64
	// lossScans counts the node-loss clock's looks at every node.
	lossScans atomic.Int64
	// busy counts the passes under way and subs are the subscriptions of
	// the loops that make them, for tests that wait for quiet (idle).
	busy atomic.Int64
	subs []*subscription
	// rng breaks the scheduler's ties; only the placement loop uses it.
	rng *rand.Rand
}

// New checks cfg, fills in its defaults and returns the loops of one term.
func New(cfg Config) (*Leader, error) {
	if cfg.Repo == nil {
		return nil, errors.New("leader: repo is required")
	}
	if cfg.NodeLossTimeout <= 0 {
		cfg.NodeLossTimeout = quadlet.DefaultNodeLossTimeoutSeconds * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = quadlet.DefaultClusterDomain
	}
	if cfg.NewSuffix == nil {
		cfg.NewSuffix = RandomSuffix
	}
	l := &Leader{
		cfg:  cfg,
		view: newView(cfg.Repo.Store(), cfg.Desired, cfg.NodeLossTimeout, cfg.Now),
		rng:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), //nolint:gosec // tie-breaking, not secrecy
		apps: NewAppSources(AppSourcesConfig{
			Repo: cfg.Repo, Interval: cfg.AppInterval, Auth: cfg.AppAuth, Resolve: cfg.Resolve, Now: cfg.Now,
			Logger: cfg.Logger.With().Str("component", "appsources").Logger(),
		}),
	}
	l.dns = newDNSRecords(l)
	return l, nil
}

// AppSources is the app-repository loop, a webhook.Dispatcher for pushes to
// app repositories.
func (l *Leader) AppSources() *AppSources { return l.apps }

// Loops returns the term's loops: the view that follows etcd, placement,
// the node-loss clock, status, app sources and DNS records.
func (l *Leader) Loops() []reconcile.Loop {
	placement := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources, factNodes, factTimers, factJobs)
	// The status loop is the statuses' only writer: their changes are its
	// own, and it waits for them after each pass instead.
	status := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources, factBuilds, factSources,
		factScheduling, factNodes, factRollouts, factJobs, factTimers)
	apps := l.view.subscribe(factDesired)
	// The records loop is the records' only writer, like the status loop.
	dns := l.view.subscribe(factAssignments, factInstances, factNodes)
	l.subs = []*subscription{placement, status}
	return []reconcile.Loop{
		{Name: "view", Run: l.view.run},
		{Name: "placement", Run: func(ctx context.Context) error {
			return l.loop(ctx, placement, "placement", l.placeOnce)
		}},
		{Name: "nodeloss", Run: l.nodeLossClock},
		{Name: "rolloutclock", Run: l.wakeClock},
		{Name: "status", Run: func(ctx context.Context) error {
			return l.loop(ctx, status, "status", l.statusOnce)
		}},
		{Name: "appsources", Run: func(ctx context.Context) error { return l.apps.run(ctx, l.view, apps) }},
		{Name: "dns", Run: func(ctx context.Context) error { return l.dns.run(ctx, dns) }},
	}
}

// loop runs pass over every workload once the view has synced and on every
// Resync, and over the workloads whose facts changed on every wake-up, until
// ctx ends. A failed pass is logged and its workloads are retried on the next
// wake-up or resync.
func (l *Leader) loop(ctx context.Context, sub *subscription, name string, pass func(ctx context.Context, keys []string) error) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", name).Logger()
	defer metrics.QueueDepth(name, 0) // no leader, no queue: a former leader shows none
	t := time.NewTicker(l.cfg.Resync)
	defer t.Stop()
	for {
		l.busy.Add(1) // before take: idle never sees work taken but not done
		keys, all, seen := l.view.take(sub)
		if all || len(keys) > 0 {
			if all {
				keys = nil
			}
			metrics.QueueDepth(name, l.queueDepth(len(keys), all))
			start := time.Now()
			err := pass(ctx, keys)
			if err != nil && ctx.Err() == nil {
				log.Warn().Err(err).Msg("pass failed")
				l.view.putBack(sub, keys, all, seen)
			}
			log.Debug().Dur("took", time.Since(start)).Int("workloads", len(keys)).Bool("all", all).Msg("pass")
			if ctx.Err() == nil {
				metrics.ReconcilePass(name, start, err)
				if err == nil {
					metrics.ReconcileLatency(name, seen)
				}
				metrics.QueueDepth(name, l.queueDepth(l.view.pending(sub)))
			}
		}
		l.busy.Add(-1)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.view.putBack(sub, nil, true, time.Now())
		case <-sub.wake:
		}
	}
}

// idle reports whether no placement or status pass is under way and none
// has work waiting.
func (l *Leader) idle() bool {
	if l.busy.Load() > 0 {
		return false
	}
	for _, s := range l.subs {
		if n, all := l.view.pending(s); n > 0 || all {
			return false
		}
	}
	return true
}

// queueDepth is how many workloads n dirty ones, or all, are.
func (l *Leader) queueDepth(n int, all bool) int {
	if all {
		return len(l.view.desired.Keys())
	}
	return n
}

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
		Nodes: nodes, Draining: draining, Desired: desired, Current: current, Reported: l.view.reportsOf(current),
		Commits: commits, SlotUsed: l.view.slotUsed, HeldIPs: l.view.heldIPs, Now: now, NewSuffix: l.cfg.NewSuffix, Rand: l.rng,
		DrainDelay: l.cfg.DrainDelay, Rollouts: rollouts, Jobs: jobs,
		DaemonRollouts: daemonRollouts, DaemonNodeDeadline: l.cfg.DaemonNodeDeadline,
	})
	l.view.setScheduling(keys, plan.Scheduling)
	defer l.view.setWakes(keys, plan.Wake)
	if err := l.confirmAbsent(ctx, &plan); err != nil {
		return err
	}
	if err := l.writeDaemonRollouts(ctx, plan); err != nil {
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
	}
	// A Job's records follow its assignments: a record never names an
	// instance that does not exist yet.
	if err := l.writeJobs(ctx, plan.Jobs); err != nil {
		return err
	}
	return l.writeRollouts(ctx, desired, plan)
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
func (l *Leader) writeRollouts(ctx context.Context, desired []workload, plan AssignmentPlan) error {
	if len(plan.Rollouts) == 0 && len(plan.Rollbacks) == 0 {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", "rollout").Logger()
	metaVersion := make(map[string]int64, len(desired))
	for _, w := range desired {
		metaVersion[w.Key()] = w.MetaVersion
	}
	writes := make([]resources.RolloutWrite, 0, len(plan.Rollouts))
	var events []api.Event
	for _, k := range slices.Sorted(maps.Keys(plan.Rollouts)) {
		ro := plan.Rollouts[k]
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
	for _, rb := range plan.Rollbacks {
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

// wakeClock marks the workloads placement asked to be woken for dirty when
// their time comes (drain delays, progress deadlines), until ctx ends.
func (l *Leader) wakeClock(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := l.view.dueWakes(l.cfg.Now())
		l.view.markDirty(factTimers, due...)
		if !l.sleepUntil(ctx, timer, next, l.view.wakesChanged) {
			return nil
		}
	}
}

// nodeLossClock wakes placement over every workload when a Ready node
// turns NotReady (no etcd key changes then): it wakes at the first moment
// one would (a heartbeat since only makes that moment early) and when a
// node registers, goes or turns fresh, and compares the Ready nodes with
// those it saw last, until ctx ends.
func (l *Leader) nodeLossClock(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var seen map[string]bool
	for {
		l.lossScans.Add(1)
		ready, next := l.view.readyNodes(l.cfg.Now())
		for n := range seen {
			if !ready[n] {
				l.view.markAll(factNodes)
				break
			}
		}
		seen = ready
		if !l.sleepUntil(ctx, timer, next, l.view.beatWake) {
			return nil
		}
	}
}

// sleepUntil waits for next (for ever when it is zero), a poke of wake or
// the end of ctx, with timer (stopped), and reports whether ctx is live.
func (l *Leader) sleepUntil(ctx context.Context, timer *time.Timer, next time.Time, wake <-chan struct{}) bool {
	var fire <-chan time.Time
	if !next.IsZero() {
		timer.Reset(max(0, next.Sub(l.cfg.Now())))
		fire = timer.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-fire:
	case <-wake:
		timer.Stop()
	}
	return true
}

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
		l.derived.Add(1)
		prev := l.view.storedStatus(k)
		st := DeriveWorkloadStatus(l.view.factsOf(w), prev.status, now)
		if prev.version != 0 && statusEqual(st, prev.status) {
			continue
		}
		writes = append(writes, resources.StatusWrite{Namespace: w.Meta.Namespace, Name: w.Meta.Name, Status: st,
			MetaVersion: w.MetaVersion, StatusVersion: prev.version})
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
		TemplateHash: w.Spec.TemplateHash,
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
	if sc, ok := v.schedulingOf(k); ok {
		wf.Unplaced, wf.UnplacedReason = sc.Unplaced, sc.Reason
		if w.Meta.Type == quadlet.TypeDaemonService {
			wf.Desired = sc.Desired // one per eligible node
		}
	}
	if wf.FromGit {
		if a, ok := v.appSource(k); ok {
			wf.App = &a
			wf.TemplateHash = instanceTemplate(w.Spec.TemplateHash, a.Commit)
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

// TermStart is when this leader's term began, as its placement counts
// heartbeats from it (resources.HeartbeatInTerm).
func (l *Leader) TermStart() time.Time { return l.view.termStart }

// IsMemberAddress reports whether a is the advertised address of a
// registered etcd member (which forwards API requests to the leader); false
// until the leader's view has synced.
func (l *Leader) IsMemberAddress(a netip.Addr) bool { return l.view.memberAddress(a) }
