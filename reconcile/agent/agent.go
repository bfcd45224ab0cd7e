package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// Agent is a node's local reconcile loop: it makes the node's containers
// match its assignments, one step per instance at a time, restarts them by
// their restart policy and runs their health checks. Stopping the agent never
// stops a container; a new agent adopts the running ones. Its containers are
// those carrying its cluster's UID and its node's name; it never touches
// another.
//
// Its parts, each owning its state: the instance table (table.go, what the
// agent knows and has under way per instance), the images known on the node
// (images.go), the runtime's health (conditions.go) and the node's network
// (network.go). The loop (Run) lists containers (listing.go), loads
// assignments (assignments.go), asks the table for the next steps and runs
// them (step.go, create.go), health checks (health.go) and verify commands
// (verify.go).
type Agent struct {
	cfg AgentConfig
	// secrets puts the secrets of instances on the agent's tmpfs.
	secrets *secretStore
	table   *instanceTable
	// clashes are host ports a start found taken lately.
	clashes portClashes
	// seeded is closed once Run has read back the restart counts of the
	// status the node reported last (Seeded).
	seeded     chan struct{}
	seededOnce sync.Once
	// images are the images known on the node; they hold the pull slots.
	images *images
	health runtimeHealth
	// network is the node's network as last made.
	network netState
	// runs are the instances' previous runs, for their logs.
	runs previousRuns

	// slots bounds the runs and starts in flight; removals and probes
	// have pools of their own, so a container's stop grace never holds
	// up another's start. MaxConcurrentSteps each.
	slots    chan struct{}
	removals chan struct{}
	probes   chan struct{}
	// wake asks for a pass; listNow asks the lister for a listing of the
	// containers.
	wake    chan struct{}
	listNow chan struct{}

	// assignments is the cache of the node's assignments
	// (followAssignments); assignmentsDirty says it changed since the
	// table took it.
	assignments      atomic.Pointer[store.Cache[assignedInstance]]
	assignmentsDirty atomic.Bool
	// retryList asks for a listing on the next tick, after one failed.
	retryList atomic.Bool
	// hostDirty asks for a new host check.
	hostDirty atomic.Bool
	// netDirty asks to make the node's network again.
	netDirty atomic.Bool
	// ingress applies the ingress routes to the node's proxy; nil without
	// an ingress directory.
	ingress *ingressUpdater
}

// NewAgent checks cfg, fills in defaults and returns an Agent.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ag := &Agent{
		secrets: &secretStore{dir: cfg.SecretsDir, source: cfg.Secrets, mount: cfg.SecretsMount},
		cfg:     cfg, table: newInstanceTable(), images: newImages(cfg.Runtime, cfg.MaxConcurrentPulls),
		slots:    make(chan struct{}, cfg.MaxConcurrentSteps),
		removals: make(chan struct{}, cfg.MaxConcurrentSteps),
		probes:   make(chan struct{}, cfg.MaxConcurrentSteps),
		wake:     make(chan struct{}, 1), listNow: make(chan struct{}, 1),
		seeded: make(chan struct{}),
	}
	ag.table.secretVersions = ag.secrets.versionsOf
	if cfg.IngressDir != "" {
		ag.ingress = newIngressUpdater(ag)
		ag.table.proxyLoaded = ag.ingress.loaded
	}
	return ag, nil
}

// Seeded is closed once Run has read back the restart counts (and the
// MaxCount windows) of the status this node reported last. The heartbeat
// waits for it (HeartbeatConfig.Ready): a report sent before would
// replace that status with an empty one, and an agent restarted under
// load would start every count at 0 again.
func (ag *Agent) Seeded() <-chan struct{} { return ag.seeded }

// IngressStatus is what the node's ingress proxy applied last, for the
// heartbeat; nil when the node runs none.
func (ag *Agent) IngressStatus() *api.IngressProxyStatus {
	if ag.ingress == nil {
		return nil
	}
	return ag.ingress.Status()
}

// Run reconciles until ctx ends. It returns nil then, after every goroutine
// it started has ended: a container run, start or removal under way
// finishes first. Containers keep running.
func (ag *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ag.seedState(ctx)
	ag.seededOnce.Do(func() { close(ag.seeded) })
	ag.assignmentsDirty.Store(true)
	ag.hostDirty.Store(true)
	ag.netDirty.Store(true)
	// The first pass waits for the first listing: the agent adopts the
	// containers it finds rather than creating them again.
	ag.listContainers(ctx)

	// etcd may be unable to answer for a moment (a member starting while
	// the quorum elects a leader): ask again rather than stop the agent.
	var netWatch <-chan store.WatchEvent
	if poll.Wait(ctx, func() (bool, error) {
		w, err := ag.cfg.Repo.Store().Watch(ctx, resources.NodeNetworkPrefix(ag.cfg.Node), 0)
		if err != nil {
			if ctx.Err() == nil {
				ag.cfg.Logger.Warn().Err(err).Msg("cannot watch the node's network record; retrying")
			}
			return false, err
		}
		netWatch = w
		return true, nil
	}) != nil {
		return nil // ctx ended
	}
	wg.Add(5)
	go func() {
		defer wg.Done()
		ag.refreshSecretVolumes(ctx)
	}()
	go func() {
		defer wg.Done()
		ag.followAssignments(ctx)
	}()
	go func() {
		defer wg.Done()
		for range netWatch {
			ag.netDirty.Store(true)
			reconcile.Poke(ag.wake)
		}
	}()
	go func() {
		defer wg.Done()
		ag.watchEvents(ctx)
	}()
	if ag.ingress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ag.ingress.run(ctx)
		}()
	}
	go func() {
		defer wg.Done()
		ag.reportLeftAlone(ctx) // beside the first pass, not before it
		for {
			select {
			case <-ctx.Done():
				return
			case <-ag.listNow:
				ag.listContainers(ctx)
			}
		}
	}()

	tick := time.NewTicker(ag.cfg.Tick)
	defer tick.Stop()
	var lastResync time.Time
	for {
		if now := ag.cfg.Now(); now.Sub(lastResync) >= ag.cfg.Resync {
			lastResync = now
			ag.netDirty.Store(true) // removed behind the agent's back?
			reconcile.Poke(ag.listNow)
			if ag.health.hostFailing() {
				ag.hostDirty.Store(true) // installed meanwhile?
			}
		}
		ag.checkHost(ctx)
		ag.retryNetworkDue(ag.cfg.Now())
		ag.ensureNetwork(ctx)
		if ag.retryList.Swap(false) {
			reconcile.Poke(ag.listNow)
		}
		start := time.Now()
		ag.pass(ctx, &wg)
		metrics.ReconcilePass("agent", start, nil)
		select {
		case <-ctx.Done():
			return nil
		case <-ag.wake:
		case <-tick.C:
		}
	}
}

// pass starts the next step, health check and verify command of every
// instance that is due one (instanceTable.next), after taking the
// assignments from their cache when they changed.
func (ag *Agent) pass(ctx context.Context, wg *sync.WaitGroup) {
	if ag.assignmentsDirty.Swap(false) && !ag.loadAssignments() {
		ag.assignmentsDirty.Store(true) // not listed yet: the listing wakes a pass
		return
	}
	for _, t := range ag.table.next(ag.cfg.Now()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch t.kind {
			case taskStep:
				ag.runStep(ctx, t)
			case taskProbe:
				ag.probe(ctx, t.id, t.c.ID, t.hc)
			case taskVerify:
				ag.verify(ctx, t.id, t.c.ID, t.v)
			}
		}()
	}
	ag.notifyIfChanged()
}

// hop logs, at debug level, that the instance of a reached one step of its
// way from a push to serving; the push-to-deploy benchmark prints the
// timeline these lines make.
func hop(log zerolog.Logger, name string, a api.Assignment) {
	log.Debug().Str("hop", name).Str("workload", a.Namespace+"/"+a.Workload).Str("instance", a.InstanceID).
		Str("commit", a.SourceCommit).Msg("hop")
}
