package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// TestSnapshotRoundTrip: a saved snapshot verifies, holds the keys at its
// revision (a deleted key is gone), and a member restored from it serves
// the same keys.
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	for i := range 20 {
		if err := st.Put(ctx, fmt.Sprintf("/kat/workloads/desired/default/w%02d/meta", i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put(ctx, "/kat/workloads/desired/default/w00/meta", []byte("changed")); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "/kat/workloads/desired/default/w19/meta"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "/kat/other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	want, rev, err := st.ListWithRevision(ctx, "/kat/workloads/desired/")
	if err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(t.TempDir(), "snap.db")
	info, err := st.SaveSnapshot(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Path != path || info.Revision != rev || info.Size == 0 || info.Keys < 20 {
		t.Errorf("info = %+v, want path %s, revision %d, 20+ keys", info, path, rev)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
	if again, err := store.VerifySnapshot(path); err != nil || again.Revision != rev {
		t.Errorf("VerifySnapshot = %+v, %v", again, err)
	}
	got, err := store.ReadSnapshot(path, "/kat/workloads/desired/")
	if err != nil {
		t.Fatal(err)
	}
	assertSameKVs(t, "snapshot", got, want)

	cfg := storetest.Config(t)
	cfg.Name = "restored"
	if err := store.RestoreSnapshot(store.RestoreConfig{SnapshotPath: path, DataDir: cfg.DataDir, Name: cfg.Name, PeerURL: cfg.ListenPeerURLs[0]}); err != nil {
		t.Fatal(err)
	}
	emb := storetest.Start(t, cfg)
	restored := store.New(emb.Client())
	defer restored.Close()
	got, err = restored.List(ctx, "/kat/workloads/desired/")
	if err != nil {
		t.Fatal(err)
	}
	assertSameKVs(t, "restored member", got, want)
	if err := store.RestoreSnapshot(store.RestoreConfig{SnapshotPath: path, DataDir: cfg.DataDir, Name: cfg.Name, PeerURL: cfg.ListenPeerURLs[0]}); err == nil {
		t.Error("restore into a non-empty data directory was accepted")
	}
}

func assertSameKVs(t *testing.T, what string, got, want []store.KV) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d keys, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || string(got[i].Value) != string(want[i].Value) {
			t.Errorf("%s: key %d = %s=%q, want %s=%q", what, i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

// TestVerifySnapshotRefusesDamage: a flipped byte, a cut-short file and a
// file that is no snapshot are all ErrCorruptSnapshot, and restore refuses
// them.
func TestVerifySnapshotRefusesDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := storetest.New(t)
	if err := st.Put(ctx, "/kat/a", []byte("b")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	if _, err := st.SaveSnapshot(ctx, good); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0xff
	tests := []struct {
		name string
		data []byte
	}{
		{"flipped byte", flipped},
		{"cut short", data[:len(data)-100]},
		{"not a snapshot", []byte("hello\n")},
		{"empty", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".db")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := store.VerifySnapshot(path); !errors.Is(err, store.ErrCorruptSnapshot) {
				t.Errorf("VerifySnapshot = %v, want ErrCorruptSnapshot", err)
			}
			out := filepath.Join(t.TempDir(), "etcd")
			if err := store.RestoreSnapshot(store.RestoreConfig{SnapshotPath: path, DataDir: out, Name: "n", PeerURL: "https://127.0.0.1:2380"}); err == nil {
				t.Error("restore accepted it")
			}
		})
	}
	if _, err := store.VerifySnapshot(filepath.Join(dir, "missing.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestSaveSnapshotFailureLeavesNothing: a snapshot into a directory that
// does not exist fails without a file.
func TestSaveSnapshotFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	path := filepath.Join(t.TempDir(), "missing", "snap.db")
	if _, err := st.SaveSnapshot(context.Background(), path); err == nil {
		t.Fatal("saved into a missing directory")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat: %v", err)
	}
}
