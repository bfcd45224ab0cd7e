package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/detach"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/reconcile/agent"
)

// Probing the cluster: while attached, every probeInterval, to see it lost
// after nodeLossTimeoutSeconds; while detached, every rejoinInterval, and
// rejoinProbes answers in a row make it back.
const (
	probeInterval  = time.Second
	rejoinInterval = 2 * time.Second
	rejoinProbes   = 2
)

// detachedDir is where a detached node's control plane keeps its data
// (its own etcd, CA, tokens and katcall.yaml), below the worker's.
const detachedDir = "detached"

// MayDetach reports whether this node may detach from its cluster when it
// loses it (docs/detached.md): only a worker that joined with
// --parent-cluster-name. An etcd member never does: its cluster's quorum
// counts it, and a member that led alone would split the cluster's state
// in two.
func (n *Node) MayDetach() bool {
	return n.state.Role == roleWorker && n.state.ParentClusterName != ""
}

// DetachedConfigPath is the katcall.yaml of the node's control plane while
// it is detached.
func (n *Node) DetachedConfigPath() string {
	return dataDir(n.dir.path(detachedDir)).katcallConfig()
}

// lastSeen is what a worker last read of its cluster: its assignments
// (from its agent's cache) and its subnet. A node that detaches seeds its
// control plane with them.
type lastSeen struct {
	mu          sync.Mutex
	assignments []api.Assignment
	subnet      netip.Prefix
}

// runDetachable runs a worker that may detach: attached, its agent works
// for the cluster; once no member has answered for nodeLossTimeoutSeconds
// it runs detached, a control plane of its own, until the cluster answers
// again; then it hands back what was created meanwhile and is a worker
// again, and so on until ctx ends. No container is stopped by the switches:
// each agent adopts the containers the one before left.
func (n *Node) runDetachable(ctx context.Context) error {
	lost := time.Duration(n.state.Cluster.Spec.NodeLossTimeoutSeconds) * time.Second
	seen := &lastSeen{}
	for {
		if err := n.runAttached(ctx, lost, seen); err != nil || ctx.Err() != nil {
			return err
		}
		if err := n.runDetached(ctx, seen); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// runAttached runs the worker's agent until ctx ends (nil) or the cluster
// is lost (nil, ctx still alive), recording what the node runs in seen at
// every answer of the cluster.
func (n *Node) runAttached(ctx context.Context, lost time.Duration, seen *lastSeen) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var ag *agent.Agent
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- n.runAgent(actx, func(a *agent.Agent) {
			mu.Lock()
			ag = a
			mu.Unlock()
		})
	}()
	probe := func(pctx context.Context) error {
		nw, err := n.repo.GetNodeNetwork(pctx, n.state.NodeName)
		if err != nil {
			return err
		}
		mu.Lock()
		a := ag
		mu.Unlock()
		var as []api.Assignment
		if a != nil {
			as = a.Assignments()
		}
		seen.mu.Lock()
		seen.subnet = nw.Subnet
		if as != nil {
			seen.assignments = as
		}
		seen.mu.Unlock()
		return nil
	}
	lostDone := make(chan error, 1)
	go func() { lostDone <- n.waitLost(actx, probe, lost, seen) }()
	select {
	case err := <-agentDone:
		cancel()
		if lerr := <-lostDone; lerr != nil && !errors.Is(lerr, context.Canceled) {
			err = errors.Join(err, lerr)
		}
		return err
	case err := <-lostDone:
		if err == nil {
			// The agent's cache, fed by a watch that outlives the link,
			// is the freshest list of what the node runs.
			mu.Lock()
			if ag != nil {
				if as := ag.Assignments(); as != nil {
					seen.mu.Lock()
					seen.assignments = as
					seen.mu.Unlock()
				}
			}
			mu.Unlock()
		}
		cancel()
		aerr := <-agentDone
		if err != nil || ctx.Err() != nil {
			return aerr
		}
		if aerr != nil {
			n.log.Warn().Err(aerr).Msg("the worker's agent stopped with an error as the node detached")
		}
		return nil
	}
}

// waitLost returns once the cluster is lost and the node can detach: it
// has a control plane of an earlier detachment to resume, or knows what it
// runs. A node that never listed its assignments (it started cut off) does
// not detach: a plane without them would stop its containers.
func (n *Node) waitLost(ctx context.Context, probe detach.Probe, lost time.Duration, seen *lastSeen) error {
	for {
		if err := detach.WaitLost(ctx, probe, lost, probeInterval); err != nil {
			return err
		}
		seen.mu.Lock()
		known := seen.assignments != nil
		seen.mu.Unlock()
		if known || n.hasDetachedPlane() {
			n.log.Warn().Dur("after", lost).Str("cluster", n.state.Cluster.Metadata.Name).Msg("no member of the cluster answers: detaching")
			return nil
		}
		n.log.Warn().Msg("no member of the cluster answers, but the node has not listed its assignments since it started: not detaching, as its own control plane would not know what it runs")
	}
}

func (n *Node) hasDetachedPlane() bool {
	_, err := os.Stat(dataDir(n.dir.path(detachedDir)).stateFile())
	return err == nil
}

// Back-off between attempts to start a detached node's own control plane.
const (
	planeRetryBase = time.Second
	planeRetryMax  = time.Minute
)

// runDetached runs the node's own control plane until the cluster answers
// again, then hands back the workloads created meanwhile and stops the
// plane. A plane that fails to start, or stops on its own, is started
// again after a back-off (planeRetryBase doubling up to planeRetryMax),
// logged at each attempt; the node's containers keep running meanwhile,
// and the cluster answering during a back-off makes the node a worker
// again when it has no plane with workloads to hand back. It returns nil
// when the node may be a worker again, or when ctx ended.
func (n *Node) runDetached(ctx context.Context, seen *lastSeen) error {
	retry := planeRetryBase
	var failures []string
	for attempt := 1; ; attempt++ {
		err := n.runPlane(ctx, seen, failures)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		failures = append(failures, err.Error())
		n.log.Error().Err(err).Int("attempt", attempt).Dur("retry_in", retry).
			Msg("the node's own control plane failed while detached; its containers keep running; starting it again after the back-off")
		if n.waitPlaneRetry(ctx, retry) {
			n.log.Info().Msg("the cluster answers again and the node has no control plane of its own to hand back: a worker again")
			return nil
		}
		retry = min(2*retry, planeRetryMax)
	}
}

// waitPlaneRetry waits d before the next attempt to start the plane,
// probing the cluster meanwhile; it reports whether the cluster is back and
// the node has no plane of an earlier attempt (with workloads created on
// it) to hand back, so that it may be a worker again.
func (n *Node) waitPlaneRetry(ctx context.Context, d time.Duration) bool {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return detach.WaitBack(wctx, n.probeCluster, min(rejoinInterval, d), rejoinProbes, nil) == nil && !n.hasDetachedPlane()
}

// probeCluster tries once to read the node's network record from the
// cluster's etcd: nil when a member answered.
func (n *Node) probeCluster(ctx context.Context) error {
	_, err := n.repo.GetNodeNetwork(ctx, n.state.NodeName)
	return err
}

// errPlaneStopped is why a plane that ended on its own is started again.
var errPlaneStopped = errors.New("the detached control plane stopped on its own")

// runPlane opens and runs the node's own control plane once (runDetached),
// recording failures, the errors of earlier attempts, in its status. It
// returns nil once the node rejoined (the plane stopped and its data
// removed) or ctx ended, and an error when the plane failed to start or
// stopped on its own.
func (n *Node) runPlane(ctx context.Context, seen *lastSeen, failures []string) error {
	plane, rec, err := n.openDetachedPlane(ctx, seen)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancel(ctx)
	// wctx ends with the plane: the waits below end with it too.
	wctx, planeEnded := context.WithCancelCause(pctx)
	planeDone := make(chan error, 1)
	go func() {
		err := plane.Run(pctx)
		planeEnded(errors.Join(errPlaneStopped, err))
		planeDone <- err
	}()
	askDone := make(chan error, 1)
	go func() { askDone <- n.askRejoin(pctx) }()
	stop := func() error {
		cancel()
		aerr := <-askDone
		perr := <-planeDone
		plane.Close()
		return errors.Join(aerr, perr)
	}
	// failed returns why the plane ended on its own, nil when it did not.
	failed := func() error {
		if cause := context.Cause(wctx); ctx.Err() == nil && errors.Is(cause, errPlaneStopped) {
			return cause
		}
		return nil
	}
	if len(failures) > 0 {
		rec.StartFailures, rec.LastStartError = len(failures), failures[len(failures)-1]
		if err := plane.repo.SetDetached(wctx, *rec); err != nil && wctx.Err() == nil {
			n.log.Warn().Err(err).Msg("cannot record the control plane's failed starts")
		}
	}
	n.log.Warn().Str("katcall_config", plane.KatcallConfigPath()).Str("cluster", rec.ParentCluster).
		Msg("detached: running a control plane of this node's own until the cluster answers again")
	link := agent.NewLeaderLink(n.state.NodeName, n.repo, n.ca.CertPEM, n.leaf)
	for {
		if err := detach.WaitBack(wctx, n.probeCluster, rejoinInterval, rejoinProbes, nil); err != nil {
			return errors.Join(stop(), failed(), ignoreCanceled(err))
		}
		err := n.handBack(wctx, plane, rec, link)
		if err == nil {
			break
		}
		if f := failed(); f != nil {
			return errors.Join(stop(), f)
		}
		n.log.Warn().Err(err).Msg("the cluster answers again, but the hand-back failed: trying again")
		rec.LastRejoinAttempt, rec.RejoinError = time.Now().UTC(), err.Error()
		if err := plane.repo.SetDetached(wctx, *rec); err != nil && wctx.Err() == nil {
			n.log.Warn().Err(err).Msg("cannot record the failed rejoin")
		}
	}
	if err := stop(); err != nil {
		return err
	}
	if err := os.RemoveAll(plane.dir.path()); err != nil {
		return fmt.Errorf("remove the detached control plane's data: %w", err)
	}
	n.log.Info().Str("cluster", rec.ParentCluster).Time("detached_since", rec.Since).Msg("rejoined the cluster: a worker again")
	return nil
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// handBack hands the cluster the workloads created on the plane while the
// node was detached. A conflict (the cluster uses the name) is logged and
// the node's files kept in DATA_DIR/handback-conflicts/{ns}/{name}/.
func (n *Node) handBack(ctx context.Context, plane *Node, rec *api.Detached, link *agent.LeaderLink) error {
	ws, err := detach.LocalWorkloads(ctx, plane.repo, n.state.NodeName, rec.Seeded)
	if err != nil {
		return err
	}
	if len(ws) == 0 {
		return nil
	}
	res, err := link.HandBack(ctx, api.HandBack{Workloads: ws})
	if err != nil {
		return err
	}
	n.log.Info().Strs("accepted", res.Accepted).Int("conflicts", len(res.Conflicts)).Msg("handed back the workloads created while detached")
	for w, why := range res.NotAdopted {
		n.log.Warn().Str("workload", w).Str("reason", why).Msg("the cluster could not adopt a handed-back workload's instances: it replaces them")
	}
	for _, c := range res.Conflicts {
		dir := n.dir.path("handback-conflicts", filepath.FromSlash(c.Workload))
		for _, w := range ws {
			if w.Namespace+"/"+w.Name != c.Workload {
				continue
			}
			for name, b := range w.Files {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return fmt.Errorf("keep the conflicting workload %s: %w", c.Workload, err)
				}
				if err := pki.WriteFileAtomic(filepath.Join(dir, name), b, 0o600); err != nil {
					return fmt.Errorf("keep the conflicting workload %s: %w", c.Workload, err)
				}
			}
		}
		n.log.Error().Str("workload", c.Workload).Str("kept_in", dir).Str("reason", c.Reason).Msg("a workload created while detached was not handed back")
	}
	return nil
}

// openDetachedPlane opens the node's own control plane: the one kat-agent
// init runs, in DATA_DIR/detached, with the node's name, UID, cluster UID
// (its containers' labels), address, labels and overlay key, the cluster's
// configuration without its Git source, one etcd member, and backups in
// its own directory. A new plane is seeded with what the node runs (seen)
// and records that it is detached; one left by an earlier run (the agent
// restarted while detached) is resumed as it is.
func (n *Node) openDetachedPlane(ctx context.Context, seen *lastSeen) (*Node, *api.Detached, error) {
	d := dataDir(n.dir.path(detachedDir))
	resume := n.hasDetachedPlane()
	if !resume {
		if err := os.RemoveAll(string(d)); err != nil {
			return nil, nil, fmt.Errorf("clear the detached control plane's directory: %w", err)
		}
		if err := os.MkdirAll(string(d), 0o700); err != nil {
			return nil, nil, fmt.Errorf("create the detached control plane's directory: %w", err)
		}
		key, err := os.ReadFile(n.dir.wgKey())
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("read the overlay key: %w", err)
		}
		if err == nil {
			if err := pki.WriteFileAtomic(d.wgKey(), key, 0o600); err != nil {
				return nil, nil, err
			}
		}
		if err := saveNodeState(d, n.detachedState(d)); err != nil {
			return nil, nil, err
		}
	}
	// The plane answers no rejoin request (RejoinGroup off).
	o := Options{DataDir: string(d), Agent: n.opts.Agent, DrainDelay: n.opts.DrainDelay, ArchiveKeep: n.opts.ArchiveKeep}
	// forget removes what a new plane that failed to open left, so that
	// the next attempt starts afresh; a resumed one is kept as it is.
	forget := func() error {
		if resume {
			return nil
		}
		if err := os.RemoveAll(string(d)); err != nil {
			return fmt.Errorf("clear the detached control plane's directory after a failed start: %w", err)
		}
		return nil
	}
	plane, err := Open(ctx, o, n.log.With().Str("plane", "detached").Logger())
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("open the detached control plane: %w", err), forget())
	}
	plane.worker = n.dir
	rec, err := n.seedPlane(ctx, plane, resume, seen)
	if err != nil {
		plane.Close()
		return nil, nil, errors.Join(err, forget())
	}
	plane.leftRunning, plane.heldSlots = rec.LeftRunning, rec.HeldSlots
	return plane, rec, nil
}

// seedPlane seeds a new plane and records it detached, or reads the
// record of a resumed one.
func (n *Node) seedPlane(ctx context.Context, plane *Node, resume bool, seen *lastSeen) (*api.Detached, error) {
	if resume {
		rec, err := plane.repo.GetDetached(ctx)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			return rec, nil
		}
	}
	seen.mu.Lock()
	as, subnet := seen.assignments, seen.subnet
	seen.mu.Unlock()
	seeded, left, slots, err := detach.Seed(ctx, plane.repo, n.state.NodeName, subnet, as)
	if err != nil {
		return nil, fmt.Errorf("seed the detached control plane: %w", err)
	}
	rec := &api.Detached{Node: n.state.NodeName, Since: time.Now().UTC(), ParentCluster: n.state.Cluster.Metadata.Name,
		ParentClusterUID: n.state.ClusterUID, Seeded: seeded, LeftRunning: left, HeldSlots: slots}
	if err := plane.repo.SetDetached(ctx, *rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// detachedState is the node state of the plane in d.
func (n *Node) detachedState(d dataDir) *nodeState {
	st := &nodeState{
		NodeName: n.state.NodeName, NodeUID: n.state.NodeUID, ClusterUID: n.state.ClusterUID,
		AdvertiseAddress: n.state.AdvertiseAddress, Cluster: n.state.Cluster, Labels: maps.Clone(n.state.Labels),
	}
	if n.state.Overlay != nil {
		ov := *n.state.Overlay
		st.Overlay = &ov
	}
	spec := &st.Cluster.Spec
	spec.GitOps = nil // Git sources are not followed while detached
	spec.EtcdMembers = 1
	for _, p := range []struct{ v, dst *int }{
		{&n.state.DetachedPorts.APIPort, &spec.APIPort}, {&n.state.DetachedPorts.EtcdClientPort, &spec.EtcdClientPort},
		{&n.state.DetachedPorts.EtcdPeerPort, &spec.EtcdPeerPort},
	} {
		if *p.v != 0 {
			*p.dst = *p.v
		}
	}
	spec.BackupPath = d.path("backups")
	return st
}
