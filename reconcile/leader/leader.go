package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// DefaultResync is Config.Resync's default.
const DefaultResync = 30 * time.Second

// Config holds the dependencies of a term's leader loops.
type Config struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// Node is the leader's node name: until the scheduler exists every
	// instance is placed on it. Required.
	Node string
	// AppInterval is how often app repositories are resolved again without
	// a webhook. Default gitsync.DefaultIntervalSeconds.
	AppInterval time.Duration
	// AppAuth names the app repositories' credential files. Default none.
	AppAuth api.GitAuth
	// Resolve resolves an app repository's ref; default gitsync.ResolveRef
	// with AppAuth. Tests replace it.
	Resolve func(ctx context.Context, g quadlet.GitSource) (string, error)
	// Resync is the period of a pass without any change. Default
	// DefaultResync.
	Resync time.Duration
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
	// passes counts the passes of each loop, for tests and benchmarks.
	placementPasses, statusPasses atomic.Int64
}

// New checks cfg, fills in its defaults and returns the loops of one term.
func New(cfg Config) (*Leader, error) {
	if cfg.Repo == nil || cfg.Node == "" {
		return nil, errors.New("leader: repo and node are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewSuffix == nil {
		cfg.NewSuffix = RandomSuffix
	}
	return &Leader{
		cfg:  cfg,
		view: newView(cfg.Repo.Store()),
		apps: NewAppSources(AppSourcesConfig{
			Repo: cfg.Repo, Interval: cfg.AppInterval, Auth: cfg.AppAuth, Resolve: cfg.Resolve, Now: cfg.Now,
			Logger: cfg.Logger.With().Str("component", "appsources").Logger(),
		}),
	}, nil
}

// AppSources is the app-repository loop, a webhook.Dispatcher for pushes to
// app repositories.
func (l *Leader) AppSources() *AppSources { return l.apps }

// Loops returns the term's loops: the view that follows etcd, placement,
// status and app sources.
func (l *Leader) Loops() []reconcile.Loop {
	wakePlacement := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources)
	// The status loop is the statuses' only writer: their changes are its
	// own, and it waits for them after each pass instead.
	wakeStatus := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources, factBuilds, factSources)
	return []reconcile.Loop{
		{Name: "view", Run: l.view.run},
		{Name: "placement", Run: func(ctx context.Context) error {
			return l.loop(ctx, wakePlacement, "placement", l.placeOnce)
		}},
		{Name: "status", Run: func(ctx context.Context) error {
			return l.loop(ctx, wakeStatus, "status", l.statusOnce)
		}},
		{Name: "appsources", Run: func(ctx context.Context) error { return l.apps.run(ctx, l.view) }},
	}
}

// loop runs pass once the view has synced, then again on every wake-up and
// every Resync, until ctx ends. A failed pass is logged and retried on the
// next wake-up or resync.
func (l *Leader) loop(ctx context.Context, wake <-chan struct{}, name string, pass func(context.Context) error) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", name).Logger()
	t := time.NewTicker(l.cfg.Resync)
	defer t.Stop()
	for {
		start := time.Now()
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Msg("pass failed")
		}
		log.Debug().Dur("took", time.Since(start)).Msg("pass")
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

// placeOnce plans the assignments of every workload and writes the plan,
// then waits until the view holds the write, so the next pass never plans
// from a copy that lacks it.
func (l *Leader) placeOnce(ctx context.Context) error {
	l.placementPasses.Add(1)
	apps := l.view.appSources()
	commits := make(map[string]string, len(apps))
	for k, a := range apps {
		commits[k] = a.Commit
	}
	plan := PlanAssignments(AssignInput{
		Node: l.cfg.Node, Desired: l.view.workloads(), Current: l.view.assignments(), Reported: l.view.reported(),
		Commits: commits, Now: l.cfg.Now().UTC(), NewSuffix: l.cfg.NewSuffix,
	})
	if plan.Empty() {
		return nil
	}
	rev, err := l.cfg.Repo.WriteAssignments(ctx, plan.Put, plan.Delete)
	if err != nil {
		return err
	}
	l.cfg.Logger.Info().Str("component", "placement").Int("added", len(plan.Put)).Int("removed", len(plan.Delete)).Msg("assignments written")
	for _, a := range plan.Put {
		l.cfg.Logger.Debug().Str("component", "placement").Str("hop", "assignment-written").Str("workload", a.Namespace+"/"+a.Workload).
			Str("instance", a.InstanceID).Str("commit", a.SourceCommit).Msg("hop")
	}
	return l.view.assigns.WaitRevision(ctx, rev)
}

// statusOnce derives every workload's status from the view's facts and
// writes those that changed. It is the only writer of workload statuses.
func (l *Leader) statusOnce(ctx context.Context) error {
	l.statusPasses.Add(1)
	facts := l.view.facts()
	now := l.cfg.Now().UTC()
	var errs []error
	var last int64
	for _, w := range facts.workloads {
		if w.Spec == nil {
			continue // between a transaction's keys: the next pass sees it whole
		}
		k := w.Key()
		prev := facts.statuses[k]
		st := DeriveWorkloadStatus(facts.of(w), prev.status, now)
		if prev.version != 0 && statusEqual(st, prev.status) {
			continue
		}
		// A write refused because the meta moved on is followed by the
		// meta's watch event, which wakes the next pass.
		ok, rev, err := l.cfg.Repo.WriteWorkloadStatus(ctx, w.Meta.Namespace, w.Meta.Name, st, w.MetaVersion, prev.version)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			last = max(last, rev)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("write workload statuses: %w", err)
	}
	if last == 0 {
		return nil
	}
	return l.view.statuses.WaitRevision(ctx, last)
}

// statusFacts is one snapshot of everything the status loop reads.
type statusFacts struct {
	workloads []workload
	byWL      map[string][]resources.Assignment
	reported  map[string]resources.InstanceStatus
	apps      map[string]resources.AppSource
	builds    map[string][]build.Record // by "ns/name/commit12"
	pathErrs  map[string]resources.PathError
	statuses  map[string]storedStatus
}

// facts takes a snapshot of the view for the status loop.
func (v *view) facts() statusFacts {
	f := statusFacts{
		workloads: v.workloads(), byWL: map[string][]resources.Assignment{}, reported: v.reported(),
		apps: v.appSources(), builds: map[string][]build.Record{}, pathErrs: map[string]resources.PathError{},
		statuses: map[string]storedStatus{},
	}
	for _, a := range v.assignments() {
		k := a.Namespace + "/" + a.Workload
		f.byWL[k] = append(f.byWL[k], a)
	}
	recs, _ := v.builds.Snapshot()
	for _, r := range recs {
		k := r.Namespace + "/" + r.Workload + "/" + reconcile.ShortCommit(r.Commit)
		f.builds[k] = append(f.builds[k], r)
	}
	srcs, _ := v.sources.Snapshot()
	for key, st := range srcs {
		name := sourceName(key)
		for _, pe := range st.PathErrors {
			f.pathErrs[name+"\x00"+pe.Path] = pe
		}
	}
	sts, _ := v.statuses.Snapshot()
	for key, st := range sts {
		f.statuses[key[len(resources.StatusPrefix()):]] = st
	}
	return f
}

// of assembles the facts of one workload.
func (f statusFacts) of(w workload) WorkloadFacts {
	k := w.Key()
	wf := WorkloadFacts{
		Meta: w.Meta, Desired: w.Spec.Desired, FromGit: w.Spec.Git != nil, Assigned: f.byWL[k], Reported: f.reported,
		TemplateHash: w.Spec.TemplateHash,
	}
	if wf.FromGit {
		if a, ok := f.apps[k]; ok {
			wf.App = &a
			wf.TemplateHash = instanceTemplate(w.Spec.TemplateHash, a.Commit)
			if a.Commit != "" {
				wf.Builds = f.builds[k+"/"+reconcile.ShortCommit(a.Commit)]
			}
		}
	}
	if o := w.Meta.Owner; o.Kind == resources.OwnerGit {
		if pe, ok := f.pathErrs[o.Source+"\x00"+o.Path]; ok {
			wf.PathError = &pe
		}
	}
	return wf
}

// sourceName is the name in a source key /kat/sources/{name}/status.
func sourceName(key string) string {
	rest := key[len(resources.SourcesPrefix()):]
	for i := range len(rest) {
		if rest[i] == '/' {
			return rest[:i]
		}
	}
	return rest
}
