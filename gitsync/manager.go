package gitsync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

var _ webhook.Dispatcher = (*Manager)(nil)

// resyncInterval bounds how long a missed watch event can leave the set of
// running sources stale.
const resyncInterval = 30 * time.Second

// ErrUnknownSource is returned for a source name that does not exist.
var ErrUnknownSource = errors.New("gitsync: unknown source")

// Config holds a Manager's dependencies.
type Config struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// DataDir is where the clones live, one directory per source. Required.
	DataDir string
	// Logger receives the sources' logs.
	Logger zerolog.Logger
	// Now replaces time.Now, for tests.
	Now func() time.Time
	// Desired is the term's index of the desired state, shared with the
	// leader's loops; the caller runs it. Default: Run makes and runs its
	// own.
	Desired *resources.DesiredIndex
	// Secrets open secret files and seal their values. Default none: every
	// secret file is a path error.
	Secrets *SecretKeys
}

// SecretKeys are what a source needs to apply secret files: the cluster's
// age identity to decrypt them, and the CA to seal their values in etcd.
type SecretKeys struct {
	Identity *age.X25519Identity
	Sealer   resources.Sealer
	// KeyID names the CA key the sealer seals with.
	KeyID string
}

// Manager runs one loop per source while Run runs (on the leader). Trigger,
// DispatchPush and Resume may be called from any goroutine.
type Manager struct {
	cfg Config
	// ownDesired is set when Run runs cfg.Desired.
	ownDesired bool

	mu      sync.Mutex
	running map[string]*runningSource
}

type runningSource struct {
	src    *source
	cancel context.CancelFunc
	done   chan struct{}
}

// NewManager returns a Manager; nothing runs until Run.
func NewManager(cfg Config) *Manager {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Logger = cfg.Logger.With().Str("component", "gitsync").Logger()
	own := cfg.Desired == nil
	if own {
		cfg.Desired = resources.NewDesiredIndex(cfg.Repo.Store())
	}
	return &Manager{cfg: cfg, ownDesired: own, running: map[string]*runningSource{}}
}

// Run starts a loop for every source in etcd and keeps the set in line with
// the specs (added, changed, deleted) until ctx ends; then it stops every
// loop and waits for them.
func (m *Manager) Run(ctx context.Context) error {
	if m.ownDesired {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := m.cfg.Desired.Run(ctx); err != nil && ctx.Err() == nil {
				m.cfg.Logger.Error().Err(err).Msg("follow the desired state")
			}
		}()
		defer func() { cancel(); <-done }()
	}
	defer m.stopAll()
	events, err := m.cfg.Repo.Store().Watch(ctx, resources.SourcesPrefix(), 0)
	if ctx.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		return fmt.Errorf("watch sources: %w", err)
	}
	t := time.NewTicker(resyncInterval)
	defer t.Stop()
	for {
		if err := m.reconcile(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logger.Warn().Err(err).Msg("list sources")
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				if events, err = m.cfg.Repo.Store().Watch(ctx, resources.SourcesPrefix(), 0); err != nil && ctx.Err() == nil {
					return fmt.Errorf("watch sources: %w", err)
				}
			}
		case <-t.C:
		}
	}
}

// reconcile starts, restarts and stops loops to match the specs in etcd.
func (m *Manager) reconcile(ctx context.Context) error {
	srcs, err := m.cfg.Repo.ListSources(ctx)
	if err != nil {
		return err
	}
	want := map[string]api.SourceSpec{}
	for _, s := range srcs {
		spec := Defaulted(s.Spec)
		if err := ValidateSpec(spec); err != nil {
			m.cfg.Logger.Warn().Str("source", spec.Name).Str("error", gitx.NewRedactor(spec.URL).String(err.Error())).Msg("ignoring invalid source")
			continue
		}
		want[spec.Name] = spec
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, rs := range m.running {
		spec, ok := want[name]
		if ok && reflect.DeepEqual(withoutTime(spec), withoutTime(rs.src.spec)) {
			continue
		}
		rs.cancel()
		<-rs.done
		delete(m.running, name)
		if !ok {
			_ = os.RemoveAll(m.cloneDir(name))
			m.cfg.Logger.Info().Str("source", name).Msg("source removed")
		}
	}
	for name, spec := range want {
		if _, ok := m.running[name]; ok {
			continue
		}
		src := newSource(spec, m.cfg.Repo, m.cfg.Desired, m.cloneDir(name), m.cfg.Logger, m.cfg.Now)
		src.secrets = m.cfg.Secrets
		sctx, cancel := context.WithCancel(ctx)
		rs := &runningSource{src: src, cancel: cancel, done: make(chan struct{})}
		m.running[name] = rs
		go func() {
			defer close(rs.done)
			src.run(sctx)
		}()
		m.cfg.Logger.Info().Str("source", name).Str("url", gitx.RedactURL(spec.URL)).Str("branch", spec.Branch).
			Str("path", spec.Path).Int("interval_seconds", spec.IntervalSeconds).Msg("following source")
	}
	return nil
}

func withoutTime(s api.SourceSpec) api.SourceSpec {
	s.UpdatedAt = time.Time{}
	return s
}

func (m *Manager) cloneDir(name string) string { return filepath.Join(m.cfg.DataDir, name) }

func (m *Manager) stopAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, rs := range m.running {
		rs.cancel()
		<-rs.done
		delete(m.running, name)
	}
}

// Trigger asks source name (every source when name is empty) to poll now.
// Bursts coalesce. It returns how many sources were triggered, and
// ErrUnknownSource for a name that is not running.
func (m *Manager) Trigger(name string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if name == "" {
		for _, rs := range m.running {
			rs.src.Trigger()
		}
		return len(m.running), nil
	}
	rs, ok := m.running[name]
	if !ok {
		return 0, fmt.Errorf("source %q: %w", name, ErrUnknownSource)
	}
	rs.src.Trigger()
	return 1, nil
}

// DispatchPush triggers every source whose repository and branch a verified
// push webhook names (every URL form of the repository matches, see
// webhook.Push.Matches). The payload is only a hint: the source fetches from
// its own URL. It returns how many sources matched; bursts coalesce.
func (m *Manager) DispatchPush(_ context.Context, p webhook.Push) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, rs := range m.running {
		if p.Matches(rs.src.spec.URL, rs.src.spec.Branch) {
			rs.src.Trigger()
			n++
		}
	}
	return n, nil
}

// Resume ends the suspension of a Git-owned workload and makes its source
// apply Git's version again on a sync started now.
func (m *Manager) Resume(ctx context.Context, ns, name string) (*api.WorkloadMeta, error) {
	meta, err := m.cfg.Repo.SetSuspended(ctx, ns, name, false)
	if err != nil {
		return nil, err
	}
	// The source decides from the desired-state index: it must hold the
	// resumption first, or the sync would still see the suspension.
	kv, err := m.cfg.Repo.Store().Get(ctx, resources.MetaKey(ns, name))
	if err != nil {
		return nil, fmt.Errorf("resume workload %s/%s: %w", ns, name, err)
	}
	m.mu.Lock()
	rs, ok := m.running[meta.Owner.Source]
	m.mu.Unlock()
	if ok {
		rs.src.fullNext(kv.Version)
		rs.src.Trigger()
	}
	return meta, nil
}

// Suspend pauses Git management of a Git-owned workload.
func (m *Manager) Suspend(ctx context.Context, ns, name string) (*api.WorkloadMeta, error) {
	return m.cfg.Repo.SetSuspended(ctx, ns, name, true)
}
