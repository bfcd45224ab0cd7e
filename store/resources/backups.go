package resources

import (
	"context"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
)

// keyBackupStatus is where the leader records its last etcd snapshot.
const keyBackupStatus = "/kat/backups/status"

// RecordBackup records an attempt at a snapshot made at: b is the snapshot
// written, or nil when the attempt failed with backupErr (the last good
// snapshot is then kept in the record).
func (r *Repo) RecordBackup(ctx context.Context, at time.Time, b *api.Backup, backupErr error) error {
	_, err := updateJSON(ctx, r, keyBackupStatus, func(st *api.BackupStatus, _ int64) error {
		st.LastAttempt = at.UTC()
		st.Error = ""
		if backupErr != nil {
			st.Error = backupErr.Error()
		}
		if b != nil {
			st.Last = b
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record backup: %w", err)
	}
	return nil
}

// BackupStatus returns the record of the leader's snapshots, or nil when no
// snapshot was ever attempted.
func (r *Repo) BackupStatus(ctx context.Context) (*api.BackupStatus, error) {
	var st api.BackupStatus
	ver, err := r.getJSON(ctx, keyBackupStatus, &st)
	if err != nil {
		return nil, fmt.Errorf("read backup status: %w", err)
	}
	if ver == 0 {
		return nil, nil
	}
	return &st, nil
}
