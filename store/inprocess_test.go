package store_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
)

// TestServeInProcessActsAsTheCertificateUser: with authentication on, a
// client whose reads, writes and watches a member serves in process may do
// what its certificate's user may, and nothing more: a worker's grants
// hold, root may do everything, and a watch sees the changes.
func TestServeInProcessActsAsTheCertificateUser(t *testing.T) {
	t.Parallel()
	emb, dial := authEtcdCerts(t, newTestPKI(t))
	ctx := testCtx(t)
	root, rootLeaf := dial(store.RootUser)
	if err := root.EnsureUser(ctx, "w1", []store.Grant{{Key: "/a/w1/", Prefix: true}, {Key: "/b/w1", Write: true}}); err != nil {
		t.Fatal(err)
	}
	if err := root.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	if err := emb.ServeInProcess(root.Client(), rootLeaf.CertPEM); err != nil {
		t.Fatal(err)
	}
	w1, w1Leaf := dial("w1")
	if err := emb.ServeInProcess(w1.Client(), w1Leaf.CertPEM); err != nil {
		t.Fatal(err)
	}
	events, err := w1.Watch(ctx, "/a/w1/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, root, "/a/w1/k", "v")
	mustPut(t, root, "/elsewhere", "v")
	select {
	case ev := <-events:
		if ev.KV.Key != "/a/w1/k" || string(ev.KV.Value) != "v" {
			t.Errorf("w1's watch saw %s=%q, want /a/w1/k=v", ev.KV.Key, ev.KV.Value)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("w1's in-process watch saw no change in 10s")
	}
	if err := w1.Put(ctx, "/b/w1", []byte("x")); err != nil {
		t.Errorf("w1 puts its writable key: %v", err)
	}
	if err := w1.Put(ctx, "/a/w1/k", []byte("x")); !errors.Is(err, store.ErrPermissionDenied) {
		t.Errorf("w1 puts in its read-only prefix: %v, want permission denied", err)
	}
	if _, err := w1.Get(ctx, "/elsewhere"); !errors.Is(err, store.ErrPermissionDenied) {
		t.Errorf("w1 reads outside its grants: %v, want permission denied", err)
	}
	if _, err := w1.Watch(ctx, "/", 0); !errors.Is(err, store.ErrPermissionDenied) {
		t.Errorf("w1 watches everything: %v, want permission denied", err)
	}
	if kv, err := root.Get(ctx, "/b/w1"); err != nil || string(kv.Value) != "x" {
		t.Errorf("root reads w1's write: %v, %v", kv, err)
	}
}

// TestServeInProcessAsksAgainAfterAuthChanges: writes made in process while
// users are added (each add changes etcd's auth revision, and etcd refuses
// a request that began before with ErrAuthOldRevision) all succeed.
func TestServeInProcessAsksAgainAfterAuthChanges(t *testing.T) {
	t.Parallel()
	emb, dial := authEtcdCerts(t, newTestPKI(t))
	ctx := testCtx(t)
	admin, _ := dial(store.RootUser)
	if err := admin.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	root, rootLeaf := dial(store.RootUser)
	if err := emb.ServeInProcess(root.Client(), rootLeaf.CertPEM); err != nil {
		t.Fatal(err)
	}
	const n = 100
	added := make(chan error, 1)
	go func() {
		for i := range n {
			if err := admin.EnsureUser(ctx, fmt.Sprintf("u%d", i), []store.Grant{{Key: "/u/", Prefix: true}}); err != nil {
				added <- err
				return
			}
		}
		added <- nil
	}()
	for i := range n {
		if err := root.Put(ctx, fmt.Sprintf("/k/%d", i), []byte("v")); err != nil {
			t.Fatalf("put %d while users are added: %v", i, err)
		}
	}
	if err := <-added; err != nil {
		t.Fatal(err)
	}
}
