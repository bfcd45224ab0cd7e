package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
)

// TestBackupEndpoint: POST /v1alpha1/cluster/backup needs the admin token,
// returns the snapshot the leader took, answers a failure with 500 and its
// cause, and 503 where no snapshots are taken; status shows the record.
func TestBackupEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	var fail atomic.Bool
	f := newFixture(t, func(c *apiserver.Config) {
		c.Backup = func(ctx context.Context) (*api.Backup, error) {
			if fail.Load() {
				return nil, errors.New("create the backup directory (cluster.kat backupPath): permission denied")
			}
			b := &api.Backup{Path: "/var/lib/kat/backups/kat-test-x.db", Node: "n1", Time: at, Size: 4096, Revision: 7, Keys: 3}
			return b, c.Repo.RecordBackup(ctx, at, b, nil)
		}
	})
	if code, _ := f.raw(t, http.MethodPost, api.BackupPath, "", nil); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d", code)
	}
	b, err := f.client.Backup(ctx)
	if err != nil || b.Path != "/var/lib/kat/backups/kat-test-x.db" || b.Revision != 7 {
		t.Fatalf("backup = %+v, %v", b, err)
	}
	st, err := f.client.Status(ctx)
	if err != nil || st.Backup == nil || st.Backup.Last == nil || st.Backup.Last.Path != b.Path {
		t.Fatalf("status backup = %+v, %v", st.Backup, err)
	}
	fail.Store(true)
	code, e := f.raw(t, http.MethodPost, api.BackupPath, token, nil)
	if code != http.StatusInternalServerError || !strings.Contains(e.Message, "backupPath") || !strings.Contains(e.Message, "permission denied") {
		t.Errorf("failed backup: %d %+v", code, e)
	}

	plain := newFixture(t, nil)
	if code, e := plain.raw(t, http.MethodPost, api.BackupPath, token, nil); code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "leader") {
		t.Errorf("without backups: %d %+v", code, e)
	}
	if st, err := plain.client.Status(ctx); err != nil || st.Backup != nil {
		t.Errorf("status before any backup = %+v, %v", st.Backup, err)
	}
}
