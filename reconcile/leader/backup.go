package leader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// Snapshotter writes a checked etcd snapshot to a path, atomically
// (*store.Etcd).
type Snapshotter interface {
	SaveSnapshot(ctx context.Context, path string) (store.SnapshotInfo, error)
}

var _ Snapshotter = (*store.Etcd)(nil)

// BackupConfig holds the dependencies of the leader's backups
// (docs/backup-restore.md).
type BackupConfig struct {
	// Snapshotter takes the snapshots. Required.
	Snapshotter Snapshotter
	// Repo records the last backup. Required.
	Repo *resources.Repo
	// Dir is where snapshots go (cluster.kat backupPath); it is created
	// when missing. Required.
	Dir string
	// Cluster is the cluster's name, part of every snapshot's file name so
	// that clusters sharing Dir keep apart. Required.
	Cluster string
	// Node is this leader's node name, recorded with each snapshot.
	Node string
	// Interval is the time between snapshots (backupIntervalMinutes).
	// Default quadlet.DefaultBackupIntervalMinutes.
	Interval time.Duration
	// Keep is how many snapshots of the cluster stay in Dir
	// (backupRetention). Default quadlet.DefaultBackupRetention.
	Keep int
	// Now replaces time.Now, for tests.
	Now    func() time.Time
	Logger zerolog.Logger
}

// Backups is the leader's etcd snapshots: a loop that takes one every
// Interval and Backup, which takes one now. Each snapshot is written
// atomically and checked (store.SaveSnapshot), then all but the newest Keep
// of the cluster's snapshots are deleted and the result is recorded in etcd
// (resources.Repo.RecordBackup).
type Backups struct {
	cfg BackupConfig
	log zerolog.Logger
	// mu serialises snapshots: the loop's and the API's.
	mu sync.Mutex
}

// NewBackups checks cfg and applies its defaults.
func NewBackups(cfg BackupConfig) (*Backups, error) {
	if cfg.Snapshotter == nil || cfg.Repo == nil || cfg.Dir == "" || cfg.Cluster == "" {
		return nil, errors.New("leader: backups need a snapshotter, a repo, a directory and the cluster's name")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = quadlet.DefaultBackupIntervalMinutes * time.Minute
	}
	if cfg.Keep <= 0 {
		cfg.Keep = quadlet.DefaultBackupRetention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Backups{cfg: cfg, log: cfg.Logger.With().Str("component", "backup").Logger()}, nil
}

// maxBackupRetry caps the wait before a failed snapshot is tried again
// (never longer than the interval).
const maxBackupRetry = 10 * time.Minute

// Run takes a snapshot whenever the newest one in Dir is Interval old (at
// once when there is none), until ctx ends. It looks at Dir again after
// every wait, so a snapshot taken meanwhile through Backup pushes the next
// one back. A failed snapshot is logged, recorded and tried again after a
// wait that doubles from a minute, capped at the interval and
// maxBackupRetry.
func (b *Backups) Run(ctx context.Context) error {
	failures := 0
	var retryAt time.Time // zero: no failed snapshot to try again
	for {
		now := b.cfg.Now()
		var wait time.Duration
		if !retryAt.IsZero() {
			wait = max(0, retryAt.Sub(now))
		} else {
			newest, err := b.newest()
			if err != nil {
				b.log.Warn().Err(err).Msg("cannot list earlier snapshots: taking one now")
			}
			wait = nextBackupIn(newest, b.cfg.Interval, now)
		}
		if wait > 0 {
			b.log.Debug().Dur("in", wait).Msg("next snapshot")
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		if _, err := b.Backup(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			retryAt = b.cfg.Now().Add(retryDelay(failures, b.cfg.Interval))
			b.log.Error().Err(err).Int("failures", failures).Time("retry_at", retryAt).Msg("etcd snapshot failed")
			continue
		}
		failures, retryAt = 0, time.Time{}
	}
}

// Backup takes a snapshot now, prunes old ones and records the result.
func (b *Backups) Backup(ctx context.Context) (*api.Backup, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Now().UTC()
	start := time.Now()
	out, err := b.save(ctx, now)
	var size int64
	if out != nil {
		size = out.Size
	}
	metrics.BackupFinished(start, size, err)
	if err == nil {
		b.log.Info().Str("path", out.Path).Int64("size", out.Size).Int64("revision", out.Revision).Int("keys", out.Keys).Msg("etcd snapshot written")
		if perr := b.prune(); perr != nil {
			b.log.Warn().Err(perr).Msg("prune old snapshots")
		}
	}
	if rerr := b.cfg.Repo.RecordBackup(ctx, now, out, err); rerr != nil {
		b.log.Warn().Err(rerr).Msg("record the backup")
	}
	return out, err
}

func (b *Backups) save(ctx context.Context, now time.Time) (*api.Backup, error) {
	if err := os.MkdirAll(b.cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the backup directory (cluster.kat backupPath): %w", err)
	}
	path := filepath.Join(b.cfg.Dir, snapshotName(b.cfg.Cluster, now))
	info, err := b.cfg.Snapshotter.SaveSnapshot(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("snapshot etcd into %s (cluster.kat backupPath): %w", b.cfg.Dir, err)
	}
	return &api.Backup{Path: info.Path, Node: b.cfg.Node, Time: now, Size: info.Size, Revision: info.Revision, Keys: info.Keys}, nil
}

// names lists the file names in Dir.
func (b *Backups) names() ([]string, error) {
	entries, err := os.ReadDir(b.cfg.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the backup directory: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// newest returns the time of the newest snapshot of the cluster in Dir,
// zero when there is none.
func (b *Backups) newest() (time.Time, error) {
	names, err := b.names()
	if err != nil {
		return time.Time{}, err
	}
	var newest time.Time
	for _, n := range names {
		if t, ok := parseSnapshotName(b.cfg.Cluster, n); ok && t.After(newest) {
			newest = t
		}
	}
	return newest, nil
}

// staleTempAge is the age past which a temporary snapshot file of the
// cluster is left over from a crash and deleted.
const staleTempAge = time.Hour

// prune deletes the cluster's snapshots beyond the newest Keep, and
// temporary files that a crash in the middle of a snapshot left behind.
func (b *Backups) prune() error {
	names, err := b.names()
	if err != nil {
		return err
	}
	var errs []error
	remove := func(n, what string) {
		if err := os.Remove(filepath.Join(b.cfg.Dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			return
		}
		b.log.Info().Str("file", n).Msg("deleted " + what)
	}
	for _, n := range snapshotsToPrune(b.cfg.Cluster, names, b.cfg.Keep) {
		remove(n, "an old snapshot")
	}
	for _, n := range names {
		if !strings.HasPrefix(n, ".kat-"+b.cfg.Cluster+"-") || !strings.HasSuffix(n, ".part") {
			continue
		}
		if fi, err := os.Stat(filepath.Join(b.cfg.Dir, n)); err == nil && time.Since(fi.ModTime()) > staleTempAge {
			remove(n, "a temporary snapshot file left by a crash")
		}
	}
	return errors.Join(errs...)
}

// snapshotTimeFormat is the UTC time in snapshot names: it sorts as it
// reads, and two snapshots a millisecond apart have different names.
const snapshotTimeFormat = "20060102T150405.000Z"

// snapshotName is the file name of the cluster's snapshot taken at t.
func snapshotName(cluster string, t time.Time) string {
	return "kat-" + cluster + "-" + t.UTC().Format(snapshotTimeFormat) + ".db"
}

// parseSnapshotName returns the time of the cluster's snapshot called
// name; ok is false for any other file.
func parseSnapshotName(cluster, name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, "kat-"+cluster+"-")
	if !ok {
		return time.Time{}, false
	}
	rest, ok = strings.CutSuffix(rest, ".db")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(snapshotTimeFormat, rest)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// nextBackupIn is how long to wait for the next snapshot: the rest of the
// interval since the newest (zero newest: none, so at once), never more
// than one interval (a newest in the future, after a clock step).
func nextBackupIn(newest time.Time, interval time.Duration, now time.Time) time.Duration {
	if newest.IsZero() {
		return 0
	}
	wait := newest.Add(interval).Sub(now)
	return max(0, min(wait, interval))
}

// snapshotsToPrune returns the cluster's snapshots among names beyond the
// newest keep, oldest first; other files are never included.
func snapshotsToPrune(cluster string, names []string, keep int) []string {
	type snap struct {
		name string
		t    time.Time
	}
	var snaps []snap
	for _, n := range names {
		if t, ok := parseSnapshotName(cluster, n); ok {
			snaps = append(snaps, snap{n, t})
		}
	}
	if len(snaps) <= keep {
		return nil
	}
	slices.SortFunc(snaps, func(a, b snap) int { return a.t.Compare(b.t) })
	out := make([]string, 0, len(snaps)-keep)
	for _, s := range snaps[:len(snaps)-keep] {
		out = append(out, s.name)
	}
	return out
}

// retryDelay is the wait after failures failed snapshots in a row: a
// minute, doubling, capped at interval and maxBackupRetry.
func retryDelay(failures int, interval time.Duration) time.Duration {
	if failures == 0 {
		return 0
	}
	d := time.Minute << min(failures-1, 10)
	return min(d, interval, maxBackupRetry)
}
