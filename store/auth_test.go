package store_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// authEtcd starts an embedded etcd that requires client certificates of
// p's CA on a TCP loopback URL, and returns a function that dials it as the
// user of a certificate with common name cn.
func authEtcd(t testing.TB, p *testPKI) func(cn string) *store.Etcd {
	t.Helper()
	_, dial := authEtcdCerts(t, p)
	return func(cn string) *store.Etcd {
		t.Helper()
		st, _ := dial(cn)
		return st
	}
}

// authEtcdCerts is authEtcd returning the member too, and a dial that
// returns the certificate it dialled with.
func authEtcdCerts(t testing.TB, p *testPKI) (*store.Embedded, func(cn string) (*store.Etcd, *pki.Leaf)) {
	t.Helper()
	cfg := storetest.Config(t)
	cfg.ListenClientURLs = []string{"https://127.0.0.1:0"}
	cfg.ClientTLS = &store.TLSFiles{CertFile: p.serverCert, KeyFile: p.serverKey, TrustedCAFile: p.caFile}
	emb := storetest.Start(t, cfg)
	urls := emb.ClientURLs()
	return emb, func(cn string) (*store.Etcd, *pki.Leaf) {
		t.Helper()
		leaf, err := p.ca.Issue(pki.LeafRequest{CommonName: cn})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := leaf.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		st, err := store.Dial(testCtx(t), store.DialConfig{Endpoints: urls, DialTimeout: 5 * time.Second,
			TLS: &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
		if err != nil {
			t.Fatalf("dial as %s: %v", cn, err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st, leaf
	}
}

// TestAuthByCertificate: with auth on, a user is its certificate's common
// name and may do what its grants say and nothing else; EnsureUser
// converges a changed list of grants; RemoveUser takes every right from a
// connection that is already open; root cannot be a node's user.
func TestAuthByCertificate(t *testing.T) {
	t.Parallel()
	dial := authEtcd(t, newTestPKI(t))
	ctx := testCtx(t)
	root := dial(store.RootUser)
	mustPut(t, root, "/a/other/k", "v")
	mustPut(t, root, "/a/w1/k", "v")
	grants := []store.Grant{{Key: "/a/w1/", Prefix: true}, {Key: "/b/w1", Write: true}}
	if err := root.EnsureUser(ctx, "w1", grants); err != nil {
		t.Fatal(err)
	}
	if err := root.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	if err := root.EnableAuth(ctx); err != nil {
		t.Fatalf("EnableAuth again: %v", err)
	}
	if on, err := root.AuthEnabled(ctx); err != nil || !on {
		t.Fatalf("AuthEnabled = %v, %v", on, err)
	}
	w1 := dial("w1")
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrPermissionDenied) {
			t.Errorf("%s: got %v, want permission denied", what, err)
		}
	}
	allowed := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	_, err := w1.List(ctx, "/a/w1/")
	allowed("list own prefix", err)
	denied("put in a read-only prefix", w1.Put(ctx, "/a/w1/k", []byte("x")))
	allowed("put the writable key", w1.Put(ctx, "/b/w1", []byte("x")))
	denied("put beside the writable key", w1.Put(ctx, "/b/w1x", []byte("x")))
	_, err = w1.Get(ctx, "/a/other/k")
	denied("get another prefix", err)
	_, err = w1.List(ctx, "/a/")
	denied("list a range wider than the grant", err)
	_, err = dial("nobody").Get(ctx, "/a/w1/k")
	denied("a certificate without a user", err)

	// A changed list: the old grants go, the new ones hold.
	if err := root.EnsureUser(ctx, "w1", []store.Grant{{Key: "/a/w1/", Prefix: true, Write: true}}); err != nil {
		t.Fatal(err)
	}
	allowed("put after the grant became writable", w1.Put(ctx, "/a/w1/k", []byte("y")))
	denied("put a key whose grant was revoked", w1.Put(ctx, "/b/w1", []byte("y")))

	for _, name := range []string{store.RootUser, ""} {
		if err := root.EnsureUser(ctx, name, nil); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("EnsureUser(%q) = %v, want ErrInvalidArgument", name, err)
		}
		if err := root.RemoveUser(ctx, name); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("RemoveUser(%q) = %v, want ErrInvalidArgument", name, err)
		}
	}

	// Removal reaches the open connection at its next request.
	if err := root.RemoveUser(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	_, err = w1.List(ctx, "/a/w1/")
	denied("list own prefix after the user was removed", err)
	if err := root.RemoveUser(ctx, "w1"); err != nil {
		t.Fatalf("RemoveUser of a removed user: %v", err)
	}
}
