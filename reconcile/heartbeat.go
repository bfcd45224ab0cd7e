package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/store/resources"
)

// HeartbeatConfig holds the dependencies of RunHeartbeat.
type HeartbeatConfig struct {
	// Repo is where the status is written. Required.
	Repo *resources.Repo
	// Node and NodeUID identify this node. Node is required.
	Node    string
	NodeUID string
	// Interval is the agent tick. Default 15s (cluster.kat agentTickSeconds).
	Interval time.Duration
	// Resources returns the node's capacity and allocatable resources. Default
	// DetectResources.
	Resources func() (resources.NodeResources, error)
	// Now replaces time.Now, for tests.
	Now    func() time.Time
	Logger zerolog.Logger
}

// RunHeartbeat writes this node's status at once and then every Interval until
// ctx is done. A failed write is logged and retried on the next tick; it
// returns only when ctx ends.
func RunHeartbeat(ctx context.Context, cfg HeartbeatConfig) error {
	if cfg.Repo == nil || cfg.Node == "" {
		return errors.New("heartbeat: repo and node name are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Resources == nil {
		cfg.Resources = DetectResources
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if err := beat(ctx, cfg); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Str("node", cfg.Node).Msg("heartbeat failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func beat(ctx context.Context, cfg HeartbeatConfig) error {
	res, err := cfg.Resources()
	if err != nil {
		return err
	}
	return cfg.Repo.PutNodeStatus(ctx, resources.NodeStatus{
		NodeName: cfg.Node, NodeUID: cfg.NodeUID, Timestamp: cfg.Now().Unix(), Resources: res,
	})
}
