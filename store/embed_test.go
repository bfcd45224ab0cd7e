package store_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

func TestEmbeddedRestartKeepsData(t *testing.T) {
	t.Parallel()
	cfg := storetest.Config(t)
	ctx := testCtx(t)

	first := storetest.Start(t, cfg)
	st := store.New(first.Client())
	mustPut(t, st, "/restart/k", "kept")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := first.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	select {
	case _, ok := <-first.Err():
		if ok {
			t.Fatal("Err channel delivered an error after a clean Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Err channel not closed after Close")
	}
	select {
	case <-first.Stopped():
	default:
		t.Fatal("Stopped not closed after Close")
	}

	second := storetest.Start(t, cfg)
	st2 := store.New(second.Client())
	t.Cleanup(func() { _ = st2.Close() })
	kv, err := st2.Get(ctx, "/restart/k")
	if err != nil {
		t.Fatal(err)
	}
	if string(kv.Value) != "kept" {
		t.Fatalf("after restart value = %q, want kept", kv.Value)
	}
}

func TestEmbeddedTCPPortZero(t *testing.T) {
	t.Parallel()
	cfg := storetest.Config(t)
	cfg.ListenClientURLs = []string{"http://127.0.0.1:0"}
	emb := storetest.Start(t, cfg)
	urls := emb.ClientURLs()
	if len(urls) != 1 || !strings.HasPrefix(urls[0], "http://127.0.0.1:") || strings.HasSuffix(urls[0], ":0") {
		t.Fatalf("ClientURLs = %q, want one http://127.0.0.1:<port>", urls)
	}
	ctx := testCtx(t)
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: urls})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	mustPut(t, st, "/tcp/k", "v")
	if kv, err := store.New(emb.Client()).Get(ctx, "/tcp/k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("in-process read = %v, %v", kv, err)
	}
}

func TestStartEmbeddedErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	busyURL := "http://" + busy.Addr().String()

	tests := []struct {
		name    string
		mutate  func(*store.EmbedConfig)
		wantIs  error
		wantSub []string
	}{
		{
			name:    "missing data dir",
			mutate:  func(c *store.EmbedConfig) { c.DataDir = "" },
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"DataDir is required"},
		},
		{
			name:    "client port in use",
			mutate:  func(c *store.EmbedConfig) { c.ListenClientURLs = []string{busyURL} },
			wantSub: []string{busy.Addr().String(), "address already in use"},
		},
		{
			name:    "https without TLS",
			mutate:  func(c *store.EmbedConfig) { c.ListenClientURLs = []string{"https://127.0.0.1:0"} },
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"ClientTLS is required"},
		},
		{
			name: "TLS on a plain URL",
			mutate: func(c *store.EmbedConfig) {
				c.ClientTLS = &store.TLSFiles{CertFile: "c", KeyFile: "k", TrustedCAFile: "ca"}
				c.ListenClientURLs = []string{"http://127.0.0.1:0"}
			},
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"not https"},
		},
		{
			name:    "host name to listen on",
			mutate:  func(c *store.EmbedConfig) { c.ListenPeerURLs = []string{"http://example.com:2380"} },
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"ListenPeerURLs", "IP address"},
		},
		{
			name:    "unknown scheme",
			mutate:  func(c *store.EmbedConfig) { c.ListenClientURLs = []string{"tcp://127.0.0.1:1"} },
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"ListenClientURLs", "tcp://127.0.0.1:1"},
		},
		{
			name:    "bad cluster state",
			mutate:  func(c *store.EmbedConfig) { c.ClusterState = "joining" },
			wantIs:  store.ErrInvalidConfig,
			wantSub: []string{"ClusterState"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := storetest.Config(t)
			tc.mutate(&cfg)
			emb, err := store.StartEmbedded(testCtx(t), cfg)
			if err == nil {
				_ = emb.Close()
				t.Fatal("StartEmbedded succeeded")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error = %v, want %v", err, tc.wantIs)
			}
			for _, sub := range tc.wantSub {
				if !strings.Contains(err.Error(), sub) {
					t.Errorf("error %q does not mention %q", err, sub)
				}
			}
		})
	}
}

func TestStartEmbeddedNotReady(t *testing.T) {
	t.Parallel()
	// Reserve a free port, then let the member use it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clientURL := "http://" + l.Addr().String()
	_ = l.Close()

	cfg := storetest.Config(t)
	cfg.ListenClientURLs = []string{clientURL}
	cfg.ListenPeerURLs = []string{"http://127.0.0.1:0"}
	cfg.AdvertisePeerURLs = []string{"http://127.0.0.1:1"}
	// A second member that never comes: no quorum, never ready.
	cfg.InitialCluster = "test=http://127.0.0.1:1,absent=http://127.0.0.1:2"
	cfg.ReadyTimeout = time.Second
	emb, err := store.StartEmbedded(testCtx(t), cfg)
	if !errors.Is(err, store.ErrNotReady) {
		if emb != nil {
			_ = emb.Close()
		}
		t.Fatalf("StartEmbedded without quorum = %v, want ErrNotReady", err)
	}

	// Everything was stopped: the client port is free again.
	cfg2 := storetest.Config(t)
	cfg2.ListenClientURLs = []string{clientURL}
	emb = storetest.Start(t, cfg2)
	if got := emb.ClientURLs(); len(got) != 1 || got[0] != clientURL {
		t.Fatalf("ClientURLs = %q, want %q", got, clientURL)
	}
}

func TestStoretestUsesUnixSockets(t *testing.T) {
	t.Parallel()
	cfg := storetest.Config(t)
	storetest.Start(t, cfg)
	for _, u := range append(cfg.ListenClientURLs, cfg.ListenPeerURLs...) {
		path := strings.TrimPrefix(u, "unix://")
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("socket of %s: %v", u, err)
		}
		if fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("%s is %v, not a socket", path, fi.Mode())
		}
	}
}
