package leader

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

// AppSourcesConfig holds the dependencies of AppSources.
type AppSourcesConfig struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// Interval is how often each app repository's ref is resolved again
	// without a webhook. Default quadlet.DefaultPollIntervalSeconds (cluster.kat's
	// spec.gitops.pollIntervalSeconds).
	Interval time.Duration
	// Auth holds the credential files for app repositories, used by the
	// default Resolve. Default: none (anonymous).
	Auth api.GitAuth
	// Resolve resolves a workload's spec.source.git to a commit. Default
	// gitx.ResolveAppRef with Auth.
	Resolve func(ctx context.Context, g quadlet.GitSource) (string, error)
	// Now replaces time.Now, for tests.
	Now    func() time.Time
	Logger zerolog.Logger
}

// AppSources is the leader's loop over the app repositories of workloads
// built from Git (workload.kat spec.source.git): it resolves each one's
// branch, tag or commit to one commit on every Interval, or at once when a
// verified webhook names the repository, and records it under
// /kat/appsources/{ns}/{name}. Placement gives the workload instances of
// that commit; a new commit is a rollout. It also keeps the build records
// under /kat/builds to the newest resources.DefaultBuildRecordsKeep commits
// of each workload, and deletes them with the workload. It is a
// webhook.Dispatcher.
type AppSources struct {
	cfg  AppSourcesConfig
	wake chan struct{}

	mu        sync.Mutex
	followed  map[string]quadlet.GitSource // "ns/name" -> what it follows, from the last pass
	lastCheck map[string]time.Time
	forced    map[string]bool
}

var _ webhook.Dispatcher = (*AppSources)(nil)

// NewAppSources fills in cfg's defaults and returns the loop; Run runs it.
func NewAppSources(cfg AppSourcesConfig) *AppSources {
	if cfg.Interval <= 0 {
		cfg.Interval = quadlet.DefaultPollIntervalSeconds * time.Second
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, g quadlet.GitSource) (string, error) {
			return gitx.ResolveAppRef(ctx, g, cfg.Auth)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &AppSources{
		cfg: cfg, wake: make(chan struct{}, 1),
		followed: map[string]quadlet.GitSource{}, lastCheck: map[string]time.Time{}, forced: map[string]bool{},
	}
}

// DispatchPush wakes the loop for every workload whose app repository and
// followed branch (or tag) a verified push names. It returns how many
// workloads matched.
func (s *AppSources) DispatchPush(_ context.Context, p webhook.Push) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, g := range s.followed {
		if pushMatches(p, g) {
			s.forced[k] = true
			n++
		}
	}
	if n > 0 {
		reconcile.Poke(s.wake)
	}
	return n, nil
}

// pushMatches reports whether push p can move what g follows. It is pure.
func pushMatches(p webhook.Push, g quadlet.GitSource) bool {
	switch {
	case g.Commit != "":
		return false // a pinned commit never moves
	case g.Tag != "":
		return p.Matches(g.Repository, "refs/tags/"+g.Tag)
	case g.Branch != "":
		return p.Matches(g.Repository, g.Branch)
	}
	// The default branch: any branch push to the repository may move it.
	key := webhook.RepoKey(g.Repository)
	for _, u := range p.RepoURLs {
		if key != "" && webhook.RepoKey(u) == key {
			return true
		}
	}
	return false
}

// run resolves until ctx ends, woken by desired-state changes (sub),
// webhooks and a timer. It follows the workloads built from Git, kept from
// v's desired state once v has synced: all of them at first, then those a
// change marks.
func (s *AppSources) run(ctx context.Context, v *view, sub *subscription) error {
	if err := v.waitSynced(ctx); err != nil {
		return nil
	}
	tick := min(s.cfg.Interval/4, 5*time.Second)
	t := time.NewTicker(max(tick, 100*time.Millisecond))
	defer t.Stop()
	fromGit := map[string]workload{}
	for {
		keys, all, _ := v.take(sub)
		if all {
			keys = v.desired.Keys()
			clear(fromGit)
		}
		for _, k := range keys {
			if w, ok := v.workload(k); ok && w.Spec != nil && w.Spec.Git != nil {
				fromGit[k] = w
			} else {
				delete(fromGit, k)
			}
		}
		// Without Git workloads and records there is nothing to resolve
		// nor delete.
		if len(fromGit) > 0 || v.apps.Len() > 0 {
			ws := slices.SortedFunc(maps.Values(fromGit), func(a, b workload) int { return strings.Compare(a.Key(), b.Key()) })
			start := time.Now()
			err := s.pass(ctx, ws)
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn().Err(err).Msg("app source pass failed")
			}
			metrics.ReconcilePass("appsources", start, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-sub.wake:
		case <-s.wake:
		}
	}
}

// appWorkload is a workload built from an app repository.
type appWorkload struct {
	Key string // "ns/name"
	Git quadlet.GitSource
}

// appSourcePlan is what one pass does: resolve Due now, delete the records
// of workloads no longer built from Git.
type appSourcePlan struct {
	Due    []string
	Delete []string
}

// planAppSources decides which app repositories to resolve now: those never
// resolved or whose ref or repository changed, those a webhook forced, and
// those last checked Interval ago or more. It is pure.
func planAppSources(ws []appWorkload, recs map[string]api.AppSource, lastCheck map[string]time.Time, forced map[string]bool, now time.Time, interval time.Duration) appSourcePlan {
	var p appSourcePlan
	seen := map[string]bool{}
	for _, w := range ws {
		seen[w.Key] = true
		rec, ok := recs[w.Key]
		last, checked := lastCheck[w.Key]
		switch {
		case !ok, rec.Repository != gitx.RedactURL(w.Git.Repository), rec.Ref != gitx.AppRef(w.Git).String(),
			forced[w.Key], !checked, now.Sub(last) >= interval:
			p.Due = append(p.Due, w.Key)
		}
	}
	for k := range recs {
		if !seen[k] {
			p.Delete = append(p.Delete, k)
		}
	}
	sort.Strings(p.Due)
	sort.Strings(p.Delete)
	return p
}

func (s *AppSources) pass(ctx context.Context, workloads []workload) error {
	recs, err := s.cfg.Repo.ListAppSources(ctx)
	if err != nil {
		return err
	}
	var ws []appWorkload
	followed := map[string]quadlet.GitSource{}
	meta := map[string]api.WorkloadMeta{}
	for _, w := range workloads {
		if w.Spec == nil || w.Spec.Git == nil {
			continue
		}
		k := w.Key()
		ws = append(ws, appWorkload{Key: k, Git: *w.Spec.Git})
		followed[k] = *w.Spec.Git
		meta[k] = w.Meta
	}
	now := s.cfg.Now()
	s.mu.Lock()
	s.followed = followed
	plan := planAppSources(ws, recs, s.lastCheck, s.forced, now, s.cfg.Interval)
	for _, k := range plan.Due {
		delete(s.forced, k)
		s.lastCheck[k] = now
	}
	for k := range s.lastCheck {
		if _, ok := followed[k]; !ok {
			delete(s.lastCheck, k)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, k := range plan.Delete {
		rec := recs[k]
		_, err := s.cfg.Repo.PruneBuildRecords(ctx, rec.Namespace, rec.Workload, 0)
		errs = append(errs, err, s.cfg.Repo.DeleteAppSource(ctx, rec.Namespace, rec.Workload))
	}
	for _, k := range plan.Due {
		errs = append(errs, s.resolve(ctx, meta[k], followed[k], recs[k]))
	}
	return errors.Join(errs...)
}

// resolve resolves one workload's ref and writes the record when something
// changed; a new commit is a rollout, and an event.
func (s *AppSources) resolve(ctx context.Context, m api.WorkloadMeta, g quadlet.GitSource, prev api.AppSource) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	commit, err := s.cfg.Resolve(rctx, g)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	now := s.cfg.Now().UTC()
	next := api.AppSource{
		Namespace: m.Namespace, Workload: m.Name, Repository: gitx.RedactURL(g.Repository), Ref: gitx.AppRef(g).String(),
		Commit: prev.Commit, ResolvedAt: prev.ResolvedAt, CheckedAt: now,
	}
	if next.Ref != prev.Ref || next.Repository != prev.Repository {
		next.Commit, next.ResolvedAt = "", time.Time{}
	}
	log := s.cfg.Logger.With().Str("namespace", m.Namespace).Str("workload", m.Name).Str("ref", next.Ref).Logger()
	if err != nil {
		next.LastError = err.Error()
	} else {
		next.Commit, next.ResolvedAt = commit, now
		log.Debug().Str("hop", "commit-resolved").Str("commit", commit).Msg("hop")
	}
	if next.Commit == prev.Commit && next.LastError == prev.LastError && next.Ref == prev.Ref && next.Repository == prev.Repository {
		return nil // nothing new: no write
	}
	if err := s.cfg.Repo.PutAppSource(ctx, next); err != nil {
		return err
	}
	log.Debug().Str("hop", "appsource-written").Str("commit", next.Commit).Msg("hop")
	obj := "workload/" + m.Namespace + "/" + m.Name
	switch {
	case err != nil:
		log.Warn().Str("error", next.LastError).Msg("cannot resolve the app repository")
		_ = s.cfg.Repo.AppendEvent(ctx, api.Event{Type: api.EventWarning, Object: obj, Reason: "ResolveFailed", Message: next.LastError})
	case next.Commit != prev.Commit:
		log.Info().Str("commit", commit).Str("previous", prev.Commit).Msg("app repository moved: rolling out")
		if _, perr := s.cfg.Repo.PruneBuildRecords(ctx, m.Namespace, m.Name, resources.DefaultBuildRecordsKeep); perr != nil {
			log.Warn().Err(perr).Msg("cannot prune old build records")
		}
		_ = s.cfg.Repo.AppendEvent(ctx, api.Event{Type: api.EventNormal, Object: obj, Reason: "NewCommit",
			Message: fmt.Sprintf("%s of %s is at %s", next.Ref, next.Repository, api.ShortCommit(commit))})
	}
	return nil
}
