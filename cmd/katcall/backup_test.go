package main

import (
	"errors"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

func TestBackupLine(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	last := &api.Backup{Path: "/b/kat-c-x.db", Node: "n1", Time: now.Add(-5 * time.Minute), Size: 20480, Revision: 42}
	tests := []struct {
		name string
		st   *api.BackupStatus
		want string
	}{
		{"never", nil, "none yet"},
		{"ok", &api.BackupStatus{Last: last, LastAttempt: last.Time}, "5m ago on n1: /b/kat-c-x.db (20 KiB, revision 42)"},
		{"failed after a good one", &api.BackupStatus{Last: last, LastAttempt: now.Add(-time.Minute), Error: errors.New("disk full\nmore").Error()},
			"5m ago on n1: /b/kat-c-x.db (20 KiB, revision 42); last attempt 1m ago failed: disk full"},
		{"only failures", &api.BackupStatus{LastAttempt: now.Add(-2 * time.Minute), Error: "permission denied"}, "none yet; last attempt 2m ago failed: permission denied"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := backupLine(tc.st, now); got != tc.want {
				t.Errorf("backupLine =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
