package storetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
)

// startTimeout bounds the start of a test member.
const startTimeout = 30 * time.Second

// Config returns an embedded etcd configuration for a test: member "test",
// data in t.TempDir(), client and peer on unix sockets in a short directory
// under os.TempDir() (socket paths are limited to about 107 bytes, which
// t.TempDir() paths can exceed), fsync off, logs discarded. The socket
// directory is removed when the test ends.
func Config(t testing.TB) store.EmbedConfig {
	t.Helper()
	sock, err := os.MkdirTemp("", "kat-etcd-") //nolint:usetesting // unix socket paths must stay short; t.TempDir paths can exceed 107 bytes
	if err != nil {
		t.Fatalf("create socket directory: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sock) })
	return store.EmbedConfig{
		Name:             "test",
		DataDir:          filepath.Join(t.TempDir(), "etcd"),
		ListenClientURLs: []string{"unix://" + filepath.Join(sock, "client")},
		ListenPeerURLs:   []string{"unix://" + filepath.Join(sock, "peer")},
		ReadyTimeout:     startTimeout,
		UnsafeNoFsync:    true,
	}
}

// Start starts an embedded etcd with cfg and closes it when the test ends.
// It fails the test when the member does not start.
func Start(t testing.TB, cfg store.EmbedConfig) *store.Embedded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	emb, err := store.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := emb.Close(); err != nil {
			t.Errorf("close embedded etcd: %v", err)
		}
	})
	return emb
}

// NewEmbedded starts an embedded etcd with Config(t), for tests that need
// the server itself. It is closed when the test ends.
func NewEmbedded(t testing.TB) *store.Embedded {
	t.Helper()
	return Start(t, Config(t))
}

// New starts an embedded etcd and returns a store on its in-process client.
// When the test ends the store is closed, then the server.
func New(t testing.TB) *store.Etcd {
	t.Helper()
	emb := NewEmbedded(t)
	st := store.New(emb.Client())
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return st
}
