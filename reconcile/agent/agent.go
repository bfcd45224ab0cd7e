package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	goruntime "runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// Runtime is the part of runtime.ContainerRuntime the agent loop uses.
type Runtime interface {
	ImageExists(ctx context.Context, ref string) (bool, error)
	PullImage(ctx context.Context, ref string, opts runtime.PullOptions) (string, error)
	RunContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	StopAndRemoveContainer(ctx context.Context, id string, grace time.Duration) error
	InspectContainer(ctx context.Context, id string) (*runtime.ContainerStatus, error)
	ListManagedContainers(ctx context.Context, labels map[string]string) ([]runtime.ContainerStatus, error)
	Events(ctx context.Context, labels map[string]string, out chan<- runtime.Event) error
	Logs(ctx context.Context, id string, opts runtime.LogOptions) (io.ReadCloser, error)
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (runtime.ExecResult, error)
}

var _ Runtime = runtime.ContainerRuntime(nil)

// listTimeout bounds one listing of the containers.
const listTimeout = time.Minute

// DefaultMaxConcurrentSteps returns AgentConfig.MaxConcurrentSteps' default: one
// container operation per CPU, at least 2 and at most 4. A podman run is
// CPU-bound and serialised by Podman's locks in part: measured on a 2-core
// host (bench:agent, 50 runs), two at once start containers 10% faster than
// one after another, while four at once cost each run 0.6 s of CPU against
// 0.35 s and end slower. Podman 4.3 runs them safely at once because each
// container has an explicit uid map (NewSpecBuilder never asks for
// --userns=auto).
func DefaultMaxConcurrentSteps() int { return min(max(goruntime.NumCPU(), 2), 4) }

// stepTimeout bounds one step (a pull, create and start, or a restart).
const stepTimeout = 5 * time.Minute

// SpecBuilder turns an assignment and its parsed Quadlet into the container
// to create, preparing what must exist on the host first (volume
// directories). hostPorts maps each container port of the
// VirtualLoadBalancer to the host port the agent picked for it. An error
// wrapping runtime.ErrInvalidSpec fails the instance.
type SpecBuilder func(a api.Assignment, q *quadlet.Quadlet, hostPorts map[int]int) (runtime.ContainerSpec, error)

// AgentConfig holds the dependencies of an Agent.
type AgentConfig struct {
	// Repo is the cluster state: the agent watches its assignments there and
	// reads the restart counts it reported before it restarted. Required.
	Repo *resources.Repo
	// Node is this node's name. Required.
	Node string
	// ClusterUID is the UID of this node's cluster. Required. Every
	// container the agent creates carries it (runtime.LabelCluster), and the
	// agent manages only containers carrying it and Node: another
	// cluster's containers on the same host, and containers without it
	// (made before the label, or by hand), are never adopted, stopped or
	// removed.
	ClusterUID string
	// Runtime runs the containers. Required.
	Runtime Runtime
	// Facts records the agent's events (a failed build): the node's one
	// road for its facts. Default resources.NewNodeFacts(Repo, nil), a
	// member's road; a worker, whose etcd user may not write, sends them
	// to the leader (LeaderLink).
	Facts Facts
	// BuildSpec builds each container's spec. Required.
	BuildSpec SpecBuilder
	// Resync is how often the agent re-lists assignments and containers
	// without any event. Default 10s.
	Resync time.Duration
	// Tick is how often timers (restart back-off, health checks) are
	// looked at. Default 500ms.
	Tick time.Duration
	// RestartBackoff is the delay before the first restart of a quick
	// exit; it doubles per quick exit up to 5 minutes. Default 1s.
	RestartBackoff time.Duration
	// MaxConcurrentPulls bounds image pulls in flight. Default 2.
	MaxConcurrentPulls int
	// MaxConcurrentSteps bounds the container steps in flight (run, start)
	// and, apart from them, the removals and the health checks. Default
	// DefaultMaxConcurrentSteps().
	MaxConcurrentSteps int
	// HostPorts is where a container port is published on the host when
	// the port itself is taken. Default runtime.DefaultHostPorts.
	HostPorts runtime.PortRange
	// StopGrace is how long a removed container gets to stop before it is
	// killed when its workload sets no spec.container.stopGracePeriodSeconds.
	// Default 10s, as Podman's.
	StopGrace time.Duration
	// Builder builds the images of assignments that carry a build
	// reference (workloads built from an app repository). Default nil: such
	// instances fail with a message saying the node cannot build.
	Builder Builder
	// BuildAuth holds the credential files for cloning app repositories.
	// Default: none (anonymous).
	BuildAuth api.GitAuth
	// CheckHost finds what the container runtime needs that is missing on
	// this host (runtime.Podman.CheckHost). The agent runs it at start, on
	// every resync while it fails, and after a step failed for that
	// reason; while it fails, the node reports RuntimeReady=False with its
	// message. Default none.
	CheckHost func(ctx context.Context) error
	// Networks makes the node's Podman network for the instances with an
	// overlay address (api.Assignment.IP), from the node's record
	// under /kat/network/nodes/. Default nil: such instances wait with
	// ErrNetworkNotReady; instances without an address run on Podman's
	// default network either way.
	Networks Networks
	// NetworkName is the node's Podman network. Default
	// DefaultNetworkName.
	NetworkName string
	// ClusterDomain is cluster.kat's clusterDomain: an instance's DNS
	// search path is {namespace}.{ClusterDomain}, then ClusterDomain.
	// Default quadlet.DefaultClusterDomain.
	ClusterDomain string
	// OnChange is called, without blocking, whenever the instance reports
	// change, so the heartbeat can send them at once. Default none.
	OnChange func()
	// Now replaces time.Now, for tests.
	Now    func() time.Time
	Logger zerolog.Logger
}

// Agent is a node's local reconcile loop: it makes the node's containers
// match its assignments, one step per instance at a time, restarts them by
// their restart policy and runs their health checks. Stopping the agent never
// stops a container; a new agent adopts the running ones. Its containers are
// those carrying its cluster's UID and its node's name; it never touches
// another.
type Agent struct {
	cfg   AgentConfig
	pulls chan struct{}
	// slots bounds the runs and starts in flight; removals and probes
	// have pools of their own, so a container's stop grace never holds
	// up another's start. MaxConcurrentSteps each.
	slots    chan struct{}
	removals chan struct{}
	probes   chan struct{}
	wake     chan struct{}
	// listNow asks the lister for a listing of the containers.
	listNow chan struct{}

	assignmentsDirty atomic.Bool
	// retryList asks for a listing on the next tick, after one failed.
	retryList atomic.Bool

	mu         sync.Mutex
	assigned   map[string]assignedInstance
	containers map[string]runtime.ContainerStatus // by instance ID, or "container:"+ID without one
	state      map[string]instanceState
	// busy holds the step in flight of each instance that has one.
	busy    map[string]stepKind
	probing map[string]bool
	// verifying holds the instances whose verify command runs.
	verifying  map[string]bool
	runtimeErr error
	// hostErr is CheckHost's last error; hostDirty asks for a new check.
	hostErr   error
	hostDirty atomic.Bool
	// network is the node's network as last made; netDirty asks to make
	// it again.
	network     nodeNetwork
	netDirty    atomic.Bool
	lastReports []api.InstanceStatus
	// listSeq numbers container listings as they start. A step records
	// what it did to its container in stepped, with the number of the
	// first listing that can show it; an older listing (started before the
	// step ended) never overrides it, so a stale listing never repeats a
	// step, and no step waits for a listing.
	listSeq int64
	stepped map[string]steppedContainer
	// images are images known to be on the node, checked once.
	images map[string]bool
	// reserved are host ports picked for creates in flight.
	reserved map[int]string
}

// steppedContainer is what a step left an instance's container as: its
// status, or gone.
type steppedContainer struct {
	status *runtime.ContainerStatus // nil: removed
	// seq is the first listing that can show it.
	seq int64
}

type assignedInstance struct {
	a    api.Assignment
	q    *quadlet.Quadlet
	rule restartRule
}

// NewAgent checks cfg, fills in defaults and returns an Agent.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Repo == nil || cfg.Node == "" || cfg.Runtime == nil || cfg.BuildSpec == nil {
		return nil, errors.New("agent: repo, node, runtime and spec builder are required")
	}
	if cfg.ClusterUID == "" {
		return nil, errors.New("agent: cluster UID is required: without it the agent could not tell its containers from another cluster's")
	}
	if cfg.Facts == nil {
		cfg.Facts = resources.NewNodeFacts(cfg.Repo, nil)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.MaxConcurrentPulls <= 0 {
		cfg.MaxConcurrentPulls = 2
	}
	if cfg.MaxConcurrentSteps <= 0 {
		cfg.MaxConcurrentSteps = DefaultMaxConcurrentSteps()
	}
	if cfg.HostPorts == (runtime.PortRange{}) {
		cfg.HostPorts = runtime.DefaultHostPorts
	}
	if err := cfg.HostPorts.Validate(); err != nil {
		return nil, fmt.Errorf("agent: host ports: %w", err)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = quadlet.DefaultStopGracePeriodSeconds * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
	}
	if cfg.NetworkName == "" {
		cfg.NetworkName = DefaultNetworkName
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = quadlet.DefaultClusterDomain
	}
	return &Agent{
		cfg: cfg, pulls: make(chan struct{}, cfg.MaxConcurrentPulls), wake: make(chan struct{}, 1),
		slots:    make(chan struct{}, cfg.MaxConcurrentSteps),
		removals: make(chan struct{}, cfg.MaxConcurrentSteps),
		probes:   make(chan struct{}, cfg.MaxConcurrentSteps),
		listNow:  make(chan struct{}, 1),
		assigned: map[string]assignedInstance{}, containers: map[string]runtime.ContainerStatus{},
		state: map[string]instanceState{}, busy: map[string]stepKind{}, probing: map[string]bool{},
		verifying: map[string]bool{},
		stepped:   map[string]steppedContainer{}, images: map[string]bool{}, reserved: map[int]string{},
	}, nil
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
	ag.assignmentsDirty.Store(true)
	ag.hostDirty.Store(true)
	ag.netDirty.Store(true)
	// The first pass waits for the first listing: the agent adopts the
	// containers it finds rather than creating them again.
	ag.listContainers(ctx)

	watch, err := ag.cfg.Repo.Store().Watch(ctx, resources.NodeAssignmentsPrefix(ag.cfg.Node), 0)
	if ctx.Err() != nil {
		return nil // stopped while starting: not a failure
	}
	if err != nil {
		return fmt.Errorf("agent: watch assignments: %w", err)
	}
	netWatch, err := ag.cfg.Repo.Store().Watch(ctx, resources.NodeNetworkPrefix(ag.cfg.Node), 0)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: watch the node's network record: %w", err)
	}
	wg.Add(4)
	go func() {
		defer wg.Done()
		for range watch {
			ag.assignmentsDirty.Store(true)
			reconcile.Poke(ag.wake)
		}
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
			ag.assignmentsDirty.Store(true)
			ag.netDirty.Store(true) // removed behind the agent's back?
			reconcile.Poke(ag.listNow)
			ag.mu.Lock()
			if ag.hostErr != nil {
				ag.hostDirty.Store(true) // installed meanwhile?
			}
			ag.mu.Unlock()
		}
		ag.checkHost(ctx)
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

// checkHost runs CheckHost when asked to, and records its verdict.
func (ag *Agent) checkHost(ctx context.Context) {
	if ag.cfg.CheckHost == nil || !ag.hostDirty.Swap(false) {
		return
	}
	err := ag.cfg.CheckHost(ctx)
	if ctx.Err() != nil {
		return
	}
	ag.mu.Lock()
	was := ag.hostErr
	ag.hostErr = err
	ag.mu.Unlock()
	switch {
	case err != nil && (was == nil || was.Error() != err.Error()):
		ag.cfg.Logger.Error().Err(err).Msg("this node cannot run containers until what is missing is installed")
	case err == nil && was != nil:
		ag.cfg.Logger.Info().Msg("the container runtime's prerequisites are installed now")
	}
	if (err == nil) != (was == nil) {
		ag.cfg.OnChange()
	}
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
	ag.mu.Lock()
	defer ag.mu.Unlock()
	for _, is := range prev.WorkloadInstances {
		st := instanceState{Restarts: is.Restarts, WindowRestarts: is.WindowRestarts, WindowStart: is.RestartWindowStart,
			finishedBefore: is.Phase == api.InstanceSucceeded || is.Phase == api.InstanceFailed}
		if is.Verification == api.VerifyPassed || is.Verification == api.VerifyFailed {
			st.Verify = verifyState{Status: is.Verification, Message: is.VerifyMessage} // the command runs once
		}
		ag.state[is.InstanceID] = st
	}
}

// watchEvents turns runtime events into re-lists, restarting the stream when
// it fails.
func (ag *Agent) watchEvents(ctx context.Context) {
	events := make(chan runtime.Event, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-events:
				if ag.listsAfter(ev) {
					reconcile.Poke(ag.listNow)
				}
			}
		}
	}()
	for ctx.Err() == nil {
		err := ag.cfg.Runtime.Events(ctx, ag.labels(), events)
		if ctx.Err() != nil {
			return
		}
		ag.cfg.Logger.Debug().Err(err).Msg("container event stream ended; resync covers the gap, reopening")
		select {
		case <-ctx.Done():
		case <-time.After(ag.cfg.Resync):
		}
	}
}

// listsAfter reports whether an event asks for a listing of the containers:
// a container that ended or changed state without a step of this agent.
// What the agent's own steps do (a run's create, init and start; a removal's
// stop, death and removal) the step reports itself, and the rest (exec
// health checks' exec and exec_died, mounts, attaches) changes no state: a
// listing after each would compete with the steps for the runtime.
func (ag *Agent) listsAfter(ev runtime.Event) bool {
	switch ev.Action {
	case runtime.ActionDied, runtime.ActionStop, runtime.ActionKill, runtime.ActionRemove,
		runtime.ActionPause, runtime.ActionResume, runtime.ActionOOM, runtime.ActionRestart:
	default:
		return false
	}
	id := ev.Labels[runtime.LabelInstance]
	if id == "" {
		id = "container:" + ev.ID
	}
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return ag.busy[id] != stepRemove
}

// listContainers lists the node's containers and applies the listing,
// keeping what steps did since it started; a failed listing is retried on
// the next tick.
func (ag *Agent) listContainers(ctx context.Context) {
	ag.mu.Lock()
	ag.listSeq++
	seq := ag.listSeq
	ag.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	cs, err := ag.cfg.Runtime.ListManagedContainers(lctx, ag.labels())
	cancel()
	if ctx.Err() != nil {
		return
	}
	ag.mu.Lock()
	repeated := err != nil && ag.runtimeErr != nil && err.Error() == ag.runtimeErr.Error()
	ag.runtimeErr = err
	if err == nil {
		ag.containers = indexContainers(ag.ownedOnly(cs))
		for id, sc := range ag.stepped {
			switch {
			case sc.seq <= seq:
				delete(ag.stepped, id) // the listing shows the step
			case sc.status == nil:
				delete(ag.containers, id)
			default:
				ag.containers[id] = *sc.status
			}
		}
		for p, owner := range ag.reserved {
			_, listed := ag.containers[owner]
			_, assigned := ag.assigned[owner]
			if listed || !assigned {
				delete(ag.reserved, p) // the listing now shows the port, or nobody needs it
			}
		}
	}
	ag.mu.Unlock()
	if err != nil {
		if !repeated {
			ag.cfg.Logger.Warn().Err(err).Msg("cannot list containers; retrying every tick")
		}
		ag.retryList.Store(true)
	}
	ag.notifyIfChanged()
	reconcile.Poke(ag.wake)
}

// pass takes the next step for every instance that has no step in flight.
func (ag *Agent) pass(ctx context.Context, wg *sync.WaitGroup) {
	if ag.assignmentsDirty.Swap(false) {
		if err := ag.loadAssignments(ctx); err != nil {
			ag.assignmentsDirty.Store(true)
			if ctx.Err() == nil {
				ag.cfg.Logger.Warn().Err(err).Msg("cannot read assignments")
			}
			return
		}
	}
	now := ag.cfg.Now()
	ag.mu.Lock()
	keys := slices.Sorted(maps.Keys(ag.assigned))
	for k := range ag.containers {
		if _, ok := ag.assigned[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, id := range keys {
		if _, busy := ag.busy[id]; busy {
			continue
		}
		ai, isAssigned := ag.assigned[id]
		var c *runtime.ContainerStatus
		if cs, ok := ag.containers[id]; ok {
			c = &cs
		}
		step, st := decideInstance(isAssigned, ai.rule, c, ag.state[id], now)
		ag.state[id] = st
		switch step {
		case stepCreate, stepStart, stepRemove:
			ag.busy[id] = step
			wg.Add(1)
			go func() {
				defer wg.Done()
				ag.runStep(ctx, id, step, ai, c)
			}()
		case stepNone:
			// A paused container is checked too: it serves nothing, and its
			// check fails.
			if isAssigned && c != nil && (c.State == runtime.StateRunning || c.State == runtime.StatePaused) && !ag.probing[id] {
				hc := healthCheckOf(ai.q)
				due, h := probeDue(st.Health, hc, c.ID, c.StartedAt, now)
				st.Health = h
				ag.state[id] = st
				if due {
					ag.probing[id] = true
					wg.Add(1)
					go func() {
						defer wg.Done()
						ag.probe(ctx, id, c.ID, hc)
					}()
				}
			}
			if v := verifyOf(ai.q); isAssigned && c != nil && !ag.verifying[id] &&
				verifyDue(v, st.Verify, instanceReport(ai.a, c, ag.state[id], healthCheckOf(ai.q) != nil, true).Ready()) {
				ag.verifying[id] = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					ag.verify(ctx, id, c.ID, v)
				}()
			}
		}
	}
	for id := range ag.state {
		_, a := ag.assigned[id]
		_, c := ag.containers[id]
		if _, busy := ag.busy[id]; !a && !c && !busy {
			delete(ag.state, id)
		}
	}
	ag.mu.Unlock()
	ag.notifyIfChanged()
}

func indexContainers(cs []runtime.ContainerStatus) map[string]runtime.ContainerStatus {
	out := make(map[string]runtime.ContainerStatus, len(cs))
	for _, c := range cs {
		k := c.Labels[runtime.LabelInstance]
		if k == "" {
			k = "container:" + c.ID
		}
		if old, dup := out[k]; dup && old.State == runtime.StateRunning {
			continue
		}
		out[k] = c
	}
	return out
}

func (ag *Agent) loadAssignments(ctx context.Context) error {
	as, err := ag.cfg.Repo.ListAssignments(ctx, ag.cfg.Node)
	if err != nil {
		return err
	}
	ag.mu.Lock()
	defer ag.mu.Unlock()
	next := make(map[string]assignedInstance, len(as))
	for _, a := range as {
		if old, ok := ag.assigned[a.InstanceID]; ok {
			next[a.InstanceID] = old // assignments never change
			continue
		}
		q, err := quadlet.ParseWorkload(a.Files, quadlet.ParseOptions{DefaultNamespace: a.Namespace})
		if err != nil {
			ag.cfg.Logger.Error().Err(err).Str("instance", a.InstanceID).Msg("assignment holds an invalid spec; ignoring it")
			continue
		}
		next[a.InstanceID] = assignedInstance{a: a, q: q, rule: ruleOf(q, ag.cfg.RestartBackoff)}
		hop(ag.cfg.Logger, "agent-saw", a)
	}
	ag.assigned = next
	return nil
}

func healthCheckOf(q *quadlet.Quadlet) *quadlet.HealthCheck {
	if q == nil || q.LoadBalancer == nil {
		return nil
	}
	return q.LoadBalancer.Spec.HealthCheck
}

// runStep carries out one step and records its outcome, and what it left
// the container as, at once: no step waits for a listing of the node.
func (ag *Agent) runStep(ctx context.Context, id string, step stepKind, ai assignedInstance, c *runtime.ContainerStatus) {
	log := ag.cfg.Logger.With().Str("instance", id).Str("step", step.String()).Logger()
	var err error
	if step == stepCreate && ai.a.Build != nil {
		// Builds run outside the runtime slots (the Builder bounds its
		// own), so a long build never holds up listings, health checks
		// and other instances' steps.
		bctx, bcancel := context.WithTimeout(ctx, buildStepTimeout)
		err = ag.buildImage(bctx, ai)
		bcancel()
	}
	var after *runtime.ContainerStatus
	known := false
	if err == nil {
		after, known, err = ag.runtimeStep(ctx, step, ai, c)
	}
	switch {
	case err == nil && step == stepRemove:
		hop(ag.cfg.Logger, "old-stopped", ai.a)
		ag.pruneAfter(ctx, c)
	case err == nil && step == stepCreate:
		hop(ag.cfg.Logger, "running", ai.a)
	}
	if step == stepCreate && ai.a.Build != nil && ag.cfg.Builder != nil {
		// The container started (or failed to): the build's follow-up
		// work no longer competes with it.
		ag.cfg.Builder.Release(ai.a.Namespace, ai.a.Workload, ai.a.Build.Commit)
	}
	now := ag.cfg.Now()
	ag.mu.Lock()
	st := ag.state[id]
	switch {
	case err == nil && step == stepStart && !c.StartedAt.IsZero():
		st = st.restarted()
		log.Info().Int("restarts", st.Restarts).Msg("restarted container")
	case err == nil:
		st.createErrors = 0
		if step != stepRemove {
			st.Message = ""
		}
		log.Info().Msg("done")
	case errors.Is(ctx.Err(), context.Canceled):
	case errors.Is(err, runtime.ErrHostPrerequisite):
		// Not the instance's fault: retried (with back-off) until the
		// program is installed; the node's RuntimeReady says what.
		ag.hostDirty.Store(true)
		wait := backoff(ai.rule.Backoff, st.createErrors)
		st.createErrors++
		st.NextAttempt, st.Message = now.Add(wait), err.Error()
		log.Error().Err(err).Dur("retry_in", wait).Msg("step failed: a program the runtime needs is missing")
	case errors.Is(err, runtime.ErrInvalidSpec):
		st.Failed, st.Message = true, err.Error()
		log.Error().Err(err).Msg("invalid container spec: the instance fails")
	default:
		wait := backoff(ai.rule.Backoff, st.createErrors)
		st.createErrors++
		st.NextAttempt, st.Message = now.Add(wait), err.Error()
		log.Warn().Err(err).Dur("retry_in", wait).Msg("step failed")
	}
	ag.state[id] = st
	if known {
		// What the step left the container as holds until a listing
		// started after it says otherwise.
		ag.stepped[id] = steppedContainer{status: after, seq: ag.listSeq + 1}
		if after == nil {
			delete(ag.containers, id)
		} else {
			ag.containers[id] = *after
		}
	}
	delete(ag.busy, id)
	ag.mu.Unlock()
	if !known && ctx.Err() == nil {
		// A failed step left the container in a state only a listing
		// tells; until it comes, the instance keeps its last known one.
		reconcile.Poke(ag.listNow)
	}
	ag.notifyIfChanged()
	reconcile.Poke(ag.wake)
}

// runtimeStep carries out the runtime calls of one step: a run or a start
// holds one of the step slots, a removal one of the removal pool, so a
// container's stop grace never holds up another's start. It returns what the
// step left the container as (nil: removed) when it knows.
//
// A container the step started is known to run from the moment podman
// returns, and that moment stands for its start time: only a health check
// needs the exact one (it tells one run from the next), so only a workload
// with a health check pays for an inspect, after the slot is free. The next
// listing brings the exact time either way.
func (ag *Agent) runtimeStep(ctx context.Context, step stepKind, ai assignedInstance, c *runtime.ContainerStatus) (*runtime.ContainerStatus, bool, error) {
	// A hung runtime call must not hold the instance forever.
	timeout := stepTimeout
	if step == stepRemove {
		timeout += ag.stopGrace(ai, c)
	}
	// A runtime call under way finishes even when the agent stops (Run
	// waits for it): a podman run killed half way leaves a container
	// Podman no longer lists but runc still runs, and a removal killed
	// half way one Podman shows "stopping" for good. Only a step still
	// waiting for its slot gives up.
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	after, err := ag.slotStep(ctx, callCtx, step, ai, c)
	if err != nil || after == nil || healthCheckOf(ai.q) == nil {
		return after, err == nil, err
	}
	ag.recordStepped(ai.a.InstanceID, after) // it runs: tell at once
	inspected, err := ag.cfg.Runtime.InspectContainer(callCtx, after.ID)
	if err != nil {
		return nil, false, nil // it ran; a listing tells the rest
	}
	return inspected, true, nil
}

// slotStep makes the runtime call of one step, under callCtx, in its
// pool's slot, unless the agent stops (ctx ends) first; it returns what the
// call left the container as: nil when removed, else running since now.
func (ag *Agent) slotStep(ctx, callCtx context.Context, step stepKind, ai assignedInstance, c *runtime.ContainerStatus) (*runtime.ContainerStatus, error) {
	pool := ag.slots
	if step == stepRemove {
		pool = ag.removals
	}
	select {
	case pool <- struct{}{}:
		defer func() { <-pool }()
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-callCtx.Done():
		return nil, callCtx.Err()
	}
	switch step {
	case stepCreate:
		hop(ag.cfg.Logger, "run-start", ai.a)
		id, spec, err := ag.create(callCtx, ai)
		if err != nil {
			return nil, err
		}
		return &runtime.ContainerStatus{ID: id, Name: spec.Name, Image: spec.Image, Labels: spec.Labels,
			State: runtime.StateRunning, Ports: spec.Ports, StartedAt: ag.cfg.Now()}, nil
	case stepStart:
		if err := ag.cfg.Runtime.StartContainer(callCtx, c.ID); err != nil {
			return nil, err
		}
		after := *c
		after.State, after.ExitCode, after.StartedAt, after.FinishedAt = runtime.StateRunning, 0, ag.cfg.Now(), time.Time{}
		return &after, nil
	default:
		return nil, ag.remove(callCtx, ai, c)
	}
}

// remove stops and removes an instance's container, leaving no process of
// it. A container whose stop was cut short (Podman shows it "stopping": an
// agent stopped or killed in the middle of a removal, before the removal
// ran apart from the agent) is stopped again first, with its whole grace:
// Podman 4.3 removes such a container without stopping it, and its
// processes would run on unseen, holding its ports and its address.
func (ag *Agent) remove(ctx context.Context, ai assignedInstance, c *runtime.ContainerStatus) error {
	grace := ag.stopGrace(ai, c)
	if c.Stopping() {
		if err := ag.cfg.Runtime.StopContainer(ctx, c.ID, grace); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("stop the container whose stop was cut short: %w", err)
		}
	}
	err := ag.cfg.Runtime.StopAndRemoveContainer(ctx, c.ID, grace)
	if errors.Is(err, runtime.ErrKilledLeftovers) {
		// Removed, and nothing of it runs: said, not failed.
		ag.cfg.Logger.Warn().Err(err).Str("instance", c.Labels[runtime.LabelInstance]).Str("container", c.ID).
			Msg("the runtime left processes of the removed container running; they were killed")
		return nil
	}
	return err
}

// stopGrace is how long a container gets between the stop signal and the
// kill: its workload's spec.container.stopGracePeriodSeconds, else the
// agent's StopGrace.
func (ag *Agent) stopGrace(ai assignedInstance, c *runtime.ContainerStatus) time.Duration {
	if ai.q != nil {
		if g := ai.q.Workload.Spec.Container.StopGracePeriodSeconds; g != nil {
			return time.Duration(*g) * time.Second
		}
		return ag.cfg.StopGrace
	}
	if c != nil { // an instance no longer assigned: what it was created with
		if g, err := strconv.Atoi(c.Labels[runtime.LabelStopGrace]); err == nil && g >= 0 {
			return time.Duration(g) * time.Second
		}
	}
	return ag.cfg.StopGrace
}

// create pulls the image when it is missing (at most MaxConcurrentPulls at
// once; an assignment with a build reference was built before), then runs
// the container: created and started in one step.
func (ag *Agent) create(ctx context.Context, ai assignedInstance) (string, runtime.ContainerSpec, error) {
	a := ai.a
	if a.Build == nil && !ag.hasImage(a.Image) {
		ok, err := ag.cfg.Runtime.ImageExists(ctx, a.Image)
		if err != nil {
			return "", runtime.ContainerSpec{}, fmt.Errorf("check image %s: %w", a.Image, err)
		}
		if !ok {
			select {
			case ag.pulls <- struct{}{}:
			case <-ctx.Done():
				return "", runtime.ContainerSpec{}, ctx.Err()
			}
			ok, err = ag.cfg.Runtime.ImageExists(ctx, a.Image) // another pull may have fetched it
			if err == nil && !ok {
				_, err = ag.cfg.Runtime.PullImage(ctx, a.Image, runtime.PullOptions{})
			}
			<-ag.pulls
			if err != nil {
				return "", runtime.ContainerSpec{}, fmt.Errorf("pull image %s: %w", a.Image, err)
			}
		}
		ag.mu.Lock()
		ag.images[a.Image] = true
		ag.mu.Unlock()
	}
	id, spec, err := ag.runContainer(ctx, ai)
	if errors.Is(err, runtime.ErrImageNotFound) {
		// Removed behind the agent's back: check it again next time.
		ag.mu.Lock()
		delete(ag.images, a.Image)
		ag.mu.Unlock()
	}
	return id, spec, err
}

// recordStepped records what a step made of an instance's container until
// a listing started after it says otherwise, and reports the change.
func (ag *Agent) recordStepped(id string, c *runtime.ContainerStatus) {
	ag.mu.Lock()
	ag.stepped[id] = steppedContainer{status: c, seq: ag.listSeq + 1}
	ag.containers[id] = *c
	ag.mu.Unlock()
	ag.notifyIfChanged()
}

func (ag *Agent) hasImage(ref string) bool {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return ag.images[ref]
}

// runContainer creates and starts the container of an instance whose image
// is on the node.
func (ag *Agent) runContainer(ctx context.Context, ai assignedInstance) (string, runtime.ContainerSpec, error) {
	a := ai.a
	// The ports stay reserved until a listing shows the container.
	hostPorts := ag.pickHostPorts(a.InstanceID, ai.q)
	created := false
	defer func() {
		if !created {
			ag.releasePorts(a.InstanceID)
		}
	}()
	spec, err := ag.cfg.BuildSpec(a, ai.q, hostPorts)
	if err != nil {
		return "", spec, fmt.Errorf("build container spec: %w", err)
	}
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	maps.Copy(spec.Labels, map[string]string{
		runtime.LabelManaged: "true", runtime.LabelNamespace: a.Namespace, runtime.LabelWorkload: a.Workload,
		runtime.LabelInstance: a.InstanceID, runtime.LabelSpecHash: a.SpecHash,
		runtime.LabelGeneration: strconv.FormatInt(a.Generation, 10), runtime.LabelNode: ag.cfg.Node,
		runtime.LabelCluster: ag.cfg.ClusterUID,
	})
	if a.SourceCommit != "" {
		spec.Labels[runtime.LabelSourceCommit] = a.SourceCommit
	}
	if err := ag.joinNetwork(&spec, a); err != nil {
		return "", spec, err
	}
	grace := ag.stopGrace(ai, nil)
	spec.StopTimeout = grace
	spec.Labels[runtime.LabelStopGrace] = strconv.Itoa(int(grace / time.Second))
	id, err := ag.cfg.Runtime.RunContainer(ctx, spec)
	if errors.Is(err, runtime.ErrAlreadyExists) {
		return "", spec, fmt.Errorf("run container: %w (a container this agent does not manage may hold the name %s: "+
			"another cluster's, or one from before containers carried %s; remove it by hand if nothing needs it)",
			err, spec.Name, runtime.LabelCluster)
	}
	if err != nil {
		return "", spec, fmt.Errorf("run container: %w", err)
	}
	created = true
	return id, spec, nil
}

// execStartAllowance is added to a health check's timeoutSeconds: the
// time Podman takes to start a command in a container (a few hundred
// milliseconds idle, seconds on a busy node) is not the check's.
const execStartAllowance = 2 * time.Second

// probe runs one health check and folds its result into the state.
func (ag *Agent) probe(ctx context.Context, id, containerID string, hc *quadlet.HealthCheck) {
	ok := false
	select {
	case ag.probes <- struct{}{}:
		res, err := ag.cfg.Runtime.Exec(ctx, containerID, hc.Exec.Command, time.Duration(max(hc.TimeoutSeconds, 1))*time.Second+execStartAllowance)
		<-ag.probes
		ok = err == nil && res.ExitCode == 0
	case <-ctx.Done():
	}
	ag.mu.Lock()
	delete(ag.probing, id)
	if st, exists := ag.state[id]; exists && st.Health.container == containerID && ctx.Err() == nil {
		was := st.Health.Status
		st.Health = probeResult(st.Health, hc, ok, ag.cfg.Now())
		ag.state[id] = st
		if st.Health.Status == api.HealthHealthy && was != api.HealthHealthy {
			hop(ag.cfg.Logger, "healthy", ag.assigned[id].a)
		}
	}
	ag.mu.Unlock()
	reconcile.Poke(ag.wake)
}

// Instances returns the report of every assigned instance, by instance ID.
func (ag *Agent) Instances() []api.InstanceStatus {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return ag.reportsLocked()
}

func (ag *Agent) reportsLocked() []api.InstanceStatus {
	out := make([]api.InstanceStatus, 0, len(ag.assigned))
	for _, id := range slices.Sorted(maps.Keys(ag.assigned)) {
		ai := ag.assigned[id]
		var c *runtime.ContainerStatus
		if cs, ok := ag.containers[id]; ok {
			c = &cs
		}
		out = append(out, instanceReport(ai.a, c, ag.state[id], healthCheckOf(ai.q) != nil, verifyOf(ai.q) != nil))
	}
	return out
}

func (ag *Agent) notifyIfChanged() {
	ag.mu.Lock()
	reps := ag.reportsLocked()
	changed := !reflect.DeepEqual(reps, ag.lastReports)
	ag.lastReports = reps
	ag.mu.Unlock()
	if changed {
		metrics.SetInstances(ag.cfg.Node, instancesByPhase(reps))
		ag.cfg.OnChange()
	}
}

// instancesByPhase counts reps by phase, with every phase present.
func instancesByPhase(reps []api.InstanceStatus) map[string]int {
	n := map[string]int{api.InstancePending: 0, api.InstanceRunning: 0,
		api.InstanceSucceeded: 0, api.InstanceFailed: 0}
	for _, r := range reps {
		n[r.Phase]++
	}
	return n
}

// Conditions reports the node conditions the agent knows: RuntimeReady,
// false while the container runtime cannot be used.
func (ag *Agent) Conditions() []api.Condition {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	c := api.Condition{Type: "RuntimeReady", Status: api.ConditionTrue, Reason: "RuntimeAvailable"}
	switch {
	case ag.runtimeErr != nil:
		c.Status, c.Reason, c.Message = api.ConditionFalse, "RuntimeUnavailable", ag.runtimeErr.Error()
	case ag.hostErr != nil:
		c.Status, c.Reason, c.Message = api.ConditionFalse, "HostPrerequisiteMissing", ag.hostErr.Error()
	}
	return []api.Condition{c}
}

// ErrUnknownInstance is returned by Logs for an instance this node does not
// run.
var ErrUnknownInstance = errors.New("agent: no such instance on this node")

// Logs streams the output of an instance's container into w until it ends
// (follow) or all of it is written.
func (ag *Agent) Logs(ctx context.Context, instanceID string, follow bool, w io.Writer) error {
	ag.mu.Lock()
	c, ok := ag.containers[instanceID]
	ag.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownInstance, instanceID)
	}
	rc, err := ag.cfg.Runtime.Logs(ctx, c.ID, runtime.LogOptions{Follow: follow})
	if err != nil {
		return fmt.Errorf("logs of %s: %w", instanceID, err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("stream logs of %s: %w", instanceID, err)
	}
	return nil
}

// pickHostPorts chooses the host port of each VirtualLoadBalancer port of a
// new container: the container port itself while no other container of this
// node publishes it and it is free on the host, otherwise a free port of
// AgentConfig.HostPorts. Until the overlay exists this is how several
// replicas share a node.
func (ag *Agent) pickHostPorts(id string, q *quadlet.Quadlet) map[int]int {
	if q.LoadBalancer == nil {
		return nil
	}
	ag.mu.Lock()
	defer ag.mu.Unlock()
	used := map[int]bool{}
	for _, c := range ag.containers {
		for _, p := range c.Ports {
			used[p.HostPort] = true
		}
	}
	for p := range ag.reserved {
		used[p] = true
	}
	out := map[int]int{}
	for _, p := range q.LoadBalancer.Spec.Ports {
		host := p.ContainerPort
		if used[host] || !runtime.HostPortFree(host) {
			host = ag.cfg.HostPorts.Pick(func(p int) bool { return used[p] })
		}
		if host == 0 {
			continue // let the runtime use the container port and report the clash
		}
		used[host] = true
		ag.reserved[host] = id
		out[p.ContainerPort] = host
	}
	return out
}

func (ag *Agent) releasePorts(id string) {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	for p, owner := range ag.reserved {
		if owner == id {
			delete(ag.reserved, p)
		}
	}
}

// hop logs, at debug level, that the instance of a reached one step of its
// way from a push to serving; the push-to-deploy benchmark prints the
// timeline these lines make.
func hop(log zerolog.Logger, name string, a api.Assignment) {
	log.Debug().Str("hop", name).Str("workload", a.Namespace+"/"+a.Workload).Str("instance", a.InstanceID).
		Str("commit", a.SourceCommit).Msg("hop")
}
