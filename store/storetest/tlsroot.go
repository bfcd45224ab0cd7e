package storetest

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
)

// StartAsLeader starts an embedded etcd with cfg the way a KAT leader runs
// it, and returns the leader's store: client URL over TLS on 127.0.0.1 with
// client certificates required (a fresh CA), authentication on, and the
// store dialled over TLS as store.RootUser. Benchmarks of the leader's
// writes measure this path, not the in-process client of New. Everything
// is closed when the test ends.
func StartAsLeader(t testing.TB, cfg store.EmbedConfig) *store.Etcd {
	t.Helper()
	dir := t.TempDir()
	ca, _, err := pki.EnsureCA(pki.PathsIn(dir, "ca"), "storetest-ca")
	if err != nil {
		t.Fatalf("make a CA: %v", err)
	}
	server := pki.PathsIn(dir, "server")
	if _, _, err := pki.EnsureLeaf(server, ca, pki.LeafRequest{CommonName: "etcd", IPs: []net.IP{net.ParseIP("127.0.0.1")}}); err != nil {
		t.Fatalf("issue the etcd server certificate: %v", err)
	}
	cfg.ListenClientURLs = []string{"https://127.0.0.1:0"}
	cfg.ClientTLS = &store.TLSFiles{CertFile: server.Cert, KeyFile: server.Key, TrustedCAFile: filepath.Join(dir, "ca.crt")}
	emb := Start(t, cfg)
	root, err := ca.Issue(pki.LeafRequest{CommonName: store.RootUser})
	if err != nil {
		t.Fatalf("issue the root client certificate: %v", err)
	}
	tlsCfg, err := pki.ClientTLSConfig(ca.Pool(), root)
	if err != nil {
		t.Fatalf("root client TLS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: emb.ClientURLs(), DialTimeout: 5 * time.Second, TLS: tlsCfg})
	if err != nil {
		t.Fatalf("dial etcd as root: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.EnableAuth(ctx); err != nil {
		t.Fatalf("enable etcd auth: %v", err)
	}
	return st
}
