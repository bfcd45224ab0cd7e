package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// ErrCorruptSnapshot is returned for a snapshot file that fails its checks:
// no checksum, a checksum that does not match, or a damaged database.
var ErrCorruptSnapshot = errors.New("store: corrupt snapshot")

// SnapshotInfo describes a snapshot file that passed VerifySnapshot.
type SnapshotInfo struct {
	// Path is the file.
	Path string
	// Size is the file's size in bytes.
	Size int64
	// Revision is the store revision the snapshot was taken at.
	Revision int64
	// Keys is the number of keys the snapshot holds.
	Keys int
	// Version is the etcd storage version of the snapshot ("" for a
	// server older than 3.6).
	Version string
}

// SaveSnapshot writes a snapshot of the etcd member the store's client is
// connected to into path, so that path never holds a partial file: it
// streams the snapshot into a hidden temporary file of the same directory,
// syncs it, checks it with VerifySnapshot, renames it to path and syncs the
// directory. On any failure the temporary file is removed and path is left
// as it was. The directory must exist.
func (s *Etcd) SaveSnapshot(ctx context.Context, path string) (SnapshotInfo, error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".*.part")
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: %w", err)
	}
	tmp := f.Name()
	renamed := false
	defer func() {
		f.Close()
		if !renamed {
			os.Remove(tmp)
		}
	}()
	resp, err := s.cli.SnapshotWithVersion(ctx)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: request it from etcd: %w", err)
	}
	defer resp.Snapshot.Close()
	if _, err := io.Copy(f, resp.Snapshot); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: close %s: %w", tmp, err)
	}
	info, err := VerifySnapshot(tmp)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return SnapshotInfo{}, fmt.Errorf("save snapshot: %w", err)
	}
	renamed = true
	info.Path = path
	if err := syncDir(dir); err != nil {
		return info, fmt.Errorf("save snapshot: %w", err)
	}
	return info, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// VerifySnapshot checks a snapshot file as etcd streams it: the SHA-256
// etcd appends must match the database before it, and the database must
// pass bbolt's consistency check (etcdutl's snapshot status). It returns
// the snapshot's revision, key count and storage version; a file that
// fails a check gives an error wrapping ErrCorruptSnapshot.
func VerifySnapshot(path string) (SnapshotInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("verify snapshot: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("verify snapshot: %w", err)
	}
	if !st.Mode().IsRegular() {
		return SnapshotInfo{}, fmt.Errorf("verify snapshot: %s is not a regular file", path)
	}
	size := st.Size()
	// etcd pads the database to whole 512-byte sectors and appends the
	// SHA-256 of it.
	if size < sha256.Size || size%512 != sha256.Size {
		return SnapshotInfo{}, fmt.Errorf("%w: %s (%d bytes) does not end with etcd's SHA-256 checksum: not an etcd snapshot, or cut short", ErrCorruptSnapshot, path, size)
	}
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		return SnapshotInfo{}, fmt.Errorf("verify snapshot: read %s: %w", path, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return SnapshotInfo{}, fmt.Errorf("verify snapshot: read %s: %w", path, err)
	}
	if !bytes.Equal(h.Sum(nil), want) {
		return SnapshotInfo{}, fmt.Errorf("%w: %s: the SHA-256 checksum does not match its content", ErrCorruptSnapshot, path)
	}
	status, err := snapshot.NewV3(zap.NewNop()).Status(path)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%w: %s: %w", ErrCorruptSnapshot, path, err)
	}
	return SnapshotInfo{Path: path, Size: size, Revision: status.Revision, Keys: status.TotalKey, Version: status.Version}, nil
}

// ReadSnapshot returns the keys under prefix (every key for "") in a
// snapshot file at its revision, with their values and ModRevisions, sorted
// by key. It reads the file without changing it; check it with
// VerifySnapshot first.
func ReadSnapshot(path, prefix string) ([]KV, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", path, err)
	}
	defer db.Close()
	latest := map[string]KV{}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Key.Name())
		if b == nil {
			return fmt.Errorf("%w: no key bucket", ErrCorruptSnapshot)
		}
		// Keys of the bucket are revisions in order: the last entry of a
		// key is its value at the snapshot's revision, or a tombstone.
		return b.ForEach(func(rev, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return fmt.Errorf("%w: revision %x: %w", ErrCorruptSnapshot, rev, err)
			}
			key := string(kv.Key)
			if !strings.HasPrefix(key, prefix) {
				return nil
			}
			if mvcc.IsTombstone(rev) {
				delete(latest, key)
				return nil
			}
			latest[key] = KV{Key: key, Value: kv.Value, Version: kv.ModRevision}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshot %s: %w", path, err)
	}
	out := make([]KV, 0, len(latest))
	for _, kv := range latest {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// RestoreConfig is a restore of a snapshot into a new member's data
// directory.
type RestoreConfig struct {
	// SnapshotPath is the snapshot file. Required.
	SnapshotPath string
	// DataDir is the member's data directory (EmbedConfig.DataDir); it
	// must not exist or be empty. Required.
	DataDir string
	// Name is the member's name (EmbedConfig.Name). Required.
	Name string
	// PeerURL is the member's advertised peer URL. Required.
	PeerURL string
	// ClusterToken names the new cluster (EmbedConfig.InitialClusterToken).
	// Default DefaultInitialClusterToken.
	ClusterToken string
}

// RestoreSnapshot makes DataDir the data directory of the only member of a
// new etcd cluster holding the snapshot's keys, with etcdutl's snapshot
// restore (which checks the snapshot's checksum again). StartEmbedded with
// the same DataDir and Name then serves it.
func RestoreSnapshot(cfg RestoreConfig) error {
	if cfg.SnapshotPath == "" || cfg.DataDir == "" || cfg.Name == "" || cfg.PeerURL == "" {
		return fmt.Errorf("%w: restore needs a snapshot, a data directory, a member name and a peer URL", ErrInvalidConfig)
	}
	token := cfg.ClusterToken
	if token == "" {
		token = DefaultInitialClusterToken
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: cfg.SnapshotPath, Name: cfg.Name, OutputDataDir: cfg.DataDir,
		PeerURLs: []string{cfg.PeerURL}, InitialCluster: cfg.Name + "=" + cfg.PeerURL, InitialClusterToken: token,
	})
	if err != nil {
		return fmt.Errorf("restore snapshot %s into %s: %w", cfg.SnapshotPath, cfg.DataDir, err)
	}
	return nil
}
