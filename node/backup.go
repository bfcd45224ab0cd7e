package node

import (
	"context"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/reconcile/leader"
)

// backups returns the leader's "take a snapshot now" for the API and its
// snapshot loop (cluster.kat backupPath, backupIntervalMinutes,
// backupRetention). A store that cannot take snapshots gets neither.
func (n *Node) backups() (func(ctx context.Context) (*api.Backup, error), []reconcile.Loop) {
	snap, ok := n.st.(leader.Snapshotter)
	if !ok {
		return nil, nil
	}
	spec := n.state.Cluster.Spec
	b, err := leader.NewBackups(leader.BackupConfig{
		Snapshotter: snap, Repo: n.repo, Dir: spec.BackupPath, Cluster: n.state.Cluster.Metadata.Name, Node: n.state.NodeName,
		Interval: time.Duration(spec.BackupIntervalMinutes) * time.Minute, Keep: spec.BackupRetention, Logger: n.log,
	})
	if err != nil {
		n.log.Error().Err(err).Msg("no etcd snapshots")
		return nil, nil
	}
	return b.Backup, []reconcile.Loop{{Name: "backup", Run: b.Run}}
}
