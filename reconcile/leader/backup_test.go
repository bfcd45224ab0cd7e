package leader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

func TestSnapshotNames(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 20, 5, 7, 123_456_789, time.UTC)
	name := snapshotName("prod", at)
	if name != "kat-prod-20261124T200507.123Z.db" {
		t.Errorf("name = %s", name)
	}
	if got, ok := parseSnapshotName("prod", name); !ok || !got.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("parse = %v, %v", got, ok)
	}
	for _, other := range []string{
		"kat-prod-20261124T200507.123Z.db.part", ".kat-prod-20261124T200507.123Z.db.1234.part",
		"kat-prodx-20261124T200507.123Z.db", "kat-prod-yesterday.db", "notes.txt", snapshotName("prod2", at),
	} {
		if _, ok := parseSnapshotName("prod", other); ok {
			t.Errorf("%s is taken for a snapshot of prod", other)
		}
	}
}

func TestNextBackupIn(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		newest time.Time
		want   time.Duration
	}{
		{"no snapshot: at once", time.Time{}, 0},
		{"recent: the rest of the interval", now.Add(-10 * time.Minute), 20 * time.Minute},
		{"just now: a whole interval", now, 30 * time.Minute},
		{"overdue: at once", now.Add(-2 * time.Hour), 0},
		{"in the future: at most one interval", now.Add(time.Hour), 30 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextBackupIn(tc.newest, 30*time.Minute, now); got != tc.want {
				t.Errorf("nextBackupIn = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSnapshotsToPrune(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(h int) string { return snapshotName("c", base.Add(time.Duration(h)*time.Hour)) }
	others := []string{"README", snapshotName("other", base), ".kat-c-x.db.1.part"}
	tests := []struct {
		name  string
		names []string
		keep  int
		want  []string
	}{
		{"fewer than keep", []string{at(1), at(2)}, 5, nil},
		{"exactly keep", []string{at(1), at(2)}, 2, nil},
		{"oldest go, whatever the listing order", []string{at(3), at(1), at(4), at(2)}, 2, []string{at(1), at(2)}},
		{"other files stay", append([]string{at(1), at(2), at(3)}, others...), 1, []string{at(1), at(2)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := snapshotsToPrune("c", tc.names, tc.keep); !slices.Equal(got, tc.want) {
				t.Errorf("prune = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		failures int
		interval time.Duration
		want     time.Duration
	}{
		{0, time.Hour, 0},
		{1, time.Hour, time.Minute},
		{3, time.Hour, 4 * time.Minute},
		{9, time.Hour, maxBackupRetry},
		{100, time.Hour, maxBackupRetry},
		{3, 2 * time.Minute, 2 * time.Minute},
	}
	for _, tc := range tests {
		if got := retryDelay(tc.failures, tc.interval); got != tc.want {
			t.Errorf("retryDelay(%d, %s) = %s, want %s", tc.failures, tc.interval, got, tc.want)
		}
	}
}

// clock is a settable time for Backups.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestBackupsWriteCheckPruneRecord: with a real etcd, each Backup writes a
// snapshot that verifies and records it in etcd; only the newest Keep of
// the cluster's snapshots stay, beside the directory's other files.
func TestBackupsWriteCheckPruneRecord(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.New(t)
	repo := resources.New(st)
	dir := filepath.Join(t.TempDir(), "backups")
	clk := &clock{t: time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC)}
	b, err := NewBackups(BackupConfig{Snapshotter: st, Repo: repo, Dir: dir, Cluster: "home", Node: "n1", Keep: 2, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Files that are no snapshot of this cluster, and a fresh temporary
	// file (a snapshot being written), stay; a temporary file of a crash
	// hours ago goes.
	foreign := []string{"notes.txt", snapshotName("work", clk.now()), ".kat-home-x.db.1.part"}
	for _, f := range append(foreign, ".kat-home-y.db.2.part") {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(filepath.Join(dir, ".kat-home-y.db.2.part"), old, old); err != nil {
		t.Fatal(err)
	}
	var written []string
	for i := range 4 {
		if err := st.Put(ctx, "/kat/test/counter", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute)
		got, err := b.Backup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		info, err := store.VerifySnapshot(got.Path)
		if err != nil {
			t.Fatalf("snapshot %d: %v", i, err)
		}
		if got.Revision != info.Revision || got.Size != info.Size || got.Node != "n1" || !got.Time.Equal(clk.now()) {
			t.Errorf("backup %d = %+v, file %+v", i, got, info)
		}
		written = append(written, filepath.Base(got.Path))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := append(append([]string(nil), written[2:]...), foreign...)
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("backup directory holds %v, want %v", left, want)
	}
	status, err := repo.BackupStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status == nil || status.Last == nil || filepath.Base(status.Last.Path) != written[3] || status.Error != "" || !status.LastAttempt.Equal(clk.now()) {
		t.Errorf("status = %+v", status)
	}
	if v, err := metrics.Value("kat_backup_duration_seconds", map[string]string{"result": "success"}); err != nil || v < 4 {
		t.Errorf("kat_backup_duration_seconds{result=success} counts %v snapshots (%v), want at least 4", v, err)
	}
	if v, err := metrics.Value("kat_backup_size_bytes", nil); err != nil || v <= 0 {
		t.Errorf("kat_backup_size_bytes = %v, %v", v, err)
	}
	if newest, err := b.newest(); err != nil || !newest.Equal(clk.now()) {
		t.Errorf("newest = %v, %v; want %v", newest, err, clk.now())
	}
}

// TestBackupsFailureIsRecorded: a backupPath that cannot be a directory
// fails with an error naming it; the record keeps the last good snapshot.
func TestBackupsFailureIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := storetest.New(t)
	repo := resources.New(st)
	tmp := t.TempDir()
	good, err := NewBackups(BackupConfig{Snapshotter: st, Repo: repo, Dir: filepath.Join(tmp, "ok"), Cluster: "c"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := good.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(tmp, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad, err := NewBackups(BackupConfig{Snapshotter: st, Repo: repo, Dir: filepath.Join(blocker, "backups"), Cluster: "c"})
	if err != nil {
		t.Fatal(err)
	}
	_, backupErr := bad.Backup(ctx)
	if backupErr == nil || !strings.Contains(backupErr.Error(), "backupPath") || !strings.Contains(backupErr.Error(), "not a directory") {
		t.Fatalf("error = %v, want one naming backupPath and the cause", backupErr)
	}
	status, err := repo.BackupStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status == nil || status.Error != backupErr.Error() {
		t.Errorf("recorded error = %q", status.Error)
	}
	if status.Last == nil || status.Last.Path != first.Path {
		t.Errorf("last good snapshot = %+v, want %s", status.Last, first.Path)
	}
}

// TestBackupsRunTakesOneAtOnceWithoutSnapshots: a new leader with no
// snapshot in backupPath takes one at once, and Run ends with its context.
func TestBackupsRunTakesOneAtOnceWithoutSnapshots(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	dir := t.TempDir()
	b, err := NewBackups(BackupConfig{Snapshotter: st, Repo: resources.New(st), Dir: dir, Cluster: "c", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	polltest.Until(t, 30*time.Second, "a snapshot in the backup directory", func() bool {
		names, _ := filepath.Glob(filepath.Join(dir, "kat-c-*.db"))
		return len(names) == 1
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// flakySnapshotter fails its first fails calls, then writes a small file.
type flakySnapshotter struct {
	mu    sync.Mutex
	fails int
	calls int
}

func (f *flakySnapshotter) SaveSnapshot(_ context.Context, path string) (store.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.fails {
		return store.SnapshotInfo{}, errors.New("disk full")
	}
	return store.SnapshotInfo{Path: path, Size: 1}, os.WriteFile(path, []byte("x"), 0o600)
}

// TestBackupsRunRetriesFailures: a failed snapshot is recorded and tried
// again (after the capped retry delay, here the short interval) until one
// succeeds, which clears the recorded error.
func TestBackupsRunRetriesFailures(t *testing.T) {
	t.Parallel()
	repo := resources.New(storetest.New(t))
	dir := t.TempDir()
	snap := &flakySnapshotter{fails: 2}
	b, err := NewBackups(BackupConfig{Snapshotter: snap, Repo: repo, Dir: dir, Cluster: "c", Interval: 20 * time.Millisecond, Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	polltest.Until(t, 30*time.Second, "a snapshot after two failures, recorded", func() bool {
		st, err := repo.BackupStatus(ctx)
		return err == nil && st != nil && st.Last != nil && st.Error == ""
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	snap.mu.Lock()
	defer snap.mu.Unlock()
	if snap.calls < 3 {
		t.Errorf("%d snapshot attempts, want at least 3", snap.calls)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "kat-c-*.db")); len(names) != 1 {
		t.Errorf("kept %v, want one snapshot (Keep 1)", names)
	}
}
