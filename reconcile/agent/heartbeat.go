package agent

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
)

// HeartbeatConfig holds the dependencies of RunHeartbeat.
type HeartbeatConfig struct {
	// Facts records the status: the node's one road for its facts.
	// Required.
	Facts Facts
	// Node and NodeUID identify this node. Node is required.
	Node    string
	NodeUID string
	// Interval is the agent tick. Default 15s (cluster.kat agentTickSeconds).
	Interval time.Duration
	// Resources returns the node's capacity and allocatable resources. Default
	// DetectResources.
	Resources func() (api.NodeResources, error)
	// Now replaces time.Now, for tests.
	Now    func() time.Time
	Logger zerolog.Logger

	// Instances returns the instance reports (Agent.Instances). Default none.
	Instances func() []api.InstanceStatus
	// Conditions returns node conditions (Agent.Conditions). Default none.
	Conditions func() []api.Condition
	// Ingress returns what the node's ingress proxy applied
	// (Agent.IngressStatus). Default none.
	Ingress func() *api.IngressProxyStatus
	// GPUs returns the node's GPUs, asked once at start. Default DetectGPUs.
	GPUs func() []api.GPU
	// Overlay is the node's WireGuard identity, sent with every status so
	// the leader records it (api.NodeStatus.Overlay). Default nil: none.
	Overlay *api.NodeOverlay
	// StartedAt is when this agent started (api.NodeStatus.AgentStartedAt):
	// a departed node whose agent started again is back. Default zero.
	StartedAt time.Time
	// Usage samples what the node and its containers use, sent with every
	// beat (api.NodeStatus.Usage) and published as metrics: at most once
	// per minUsageGap (beats woken in between resend the last sample). A
	// failed sample is logged and the beat goes without. Default nil:
	// none.
	Usage func() (*api.NodeUsage, error)
	// Wake asks for a beat before the next tick, for example when an
	// instance changed. Beats are at most minBeatGap apart. Default none.
	Wake <-chan struct{}
	// Ready, when set, is waited for before the first beat (Agent.Seeded):
	// a beat replaces the node's last reported status, whose restart
	// counts a starting agent reads back first. Default none.
	Ready <-chan struct{}
}

// minBeatGap spaces beats asked for through HeartbeatConfig.Wake.
const minBeatGap = 200 * time.Millisecond

// minUsageGap spaces usage samples: a burst of woken beats samples once.
const minUsageGap = 5 * time.Second

// usageMemo is the last usage sample and when it was taken.
type usageMemo struct {
	last *api.NodeUsage
	at   time.Time
}

// RunHeartbeat writes this node's status at once (once Ready) and then every Interval until
// ctx is done. A failed write is logged and retried on the next tick; it
// returns only when ctx ends.
func RunHeartbeat(ctx context.Context, cfg HeartbeatConfig) error {
	if cfg.Facts == nil || cfg.Node == "" {
		return errors.New("heartbeat: facts and the node name are required")
	}
	if cfg.GPUs == nil {
		cfg.GPUs = DetectGPUs
	}
	gpus := cfg.GPUs()
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Resources == nil {
		cfg.Resources = DetectResources
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Ready != nil {
		select {
		case <-cfg.Ready:
		case <-ctx.Done():
			return nil
		}
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	var usage usageMemo
	for {
		var retry <-chan time.Time
		last := time.Now()
		if err := beat(ctx, cfg, gpus, &usage); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Str("node", cfg.Node).Msg("heartbeat failed")
			// A failed beat (the leader not serving yet) is retried soon.
			retry = time.After(min(cfg.Interval, time.Second))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry:
		case <-t.C:
		case <-cfg.Wake:
			// At once, unless the last beat was under minBeatGap ago: a
			// burst of changes makes a beat per gap, not one per change.
			if wait := minBeatGap - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
	}
}

func beat(ctx context.Context, cfg HeartbeatConfig, gpus []api.GPU, usage *usageMemo) error {
	res, err := cfg.Resources()
	if err != nil {
		return err
	}
	st := api.NodeStatus{
		NodeName: cfg.Node, NodeUID: cfg.NodeUID, Timestamp: cfg.Now().Unix(), Resources: res, GPUs: gpus,
		Overlay: cfg.Overlay, AgentStartedAt: cfg.StartedAt,
	}
	if cfg.Instances != nil {
		st.WorkloadInstances = cfg.Instances()
	}
	if cfg.Conditions != nil {
		st.Conditions = cfg.Conditions()
	}
	if cfg.Usage != nil {
		if now := cfg.Now(); usage.last == nil || now.Sub(usage.at) >= min(cfg.Interval, minUsageGap) {
			u, err := cfg.Usage()
			if err != nil {
				cfg.Logger.Warn().Err(err).Msg("usage not sampled")
			} else {
				publishUsage(cfg.Node, u)
			}
			usage.last, usage.at = u, now
		}
		st.Usage = usage.last
	}
	if cfg.Ingress != nil {
		st.Ingress = cfg.Ingress()
	}
	return cfg.Facts.RecordStatus(ctx, st)
}
