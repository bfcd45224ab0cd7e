package store_test

import (
	"path/filepath"
	"strconv"
	"testing"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// BenchmarkPut measures one Put through the in-process client of an
// embedded etcd (fsync off, as storetest sets it up).
func BenchmarkPut(b *testing.B) {
	benchPut(b, storetest.New(b))
}

// BenchmarkPutRootTLS measures the same Put as the leader makes it: as the
// root user of an etcd with authentication on, over mutual TLS to its
// loopback client URL.
func BenchmarkPutRootTLS(b *testing.B) {
	dial := authEtcd(b, newTestPKI(b))
	st := dial(store.RootUser)
	if err := st.EnableAuth(b.Context()); err != nil {
		b.Fatal(err)
	}
	benchPut(b, st)
}

func benchPut(b *testing.B, st store.StateStore) {
	b.Helper()
	ctx := b.Context()
	value := []byte(`{"name":"web","replicas":3}`)
	i := 0
	for b.Loop() {
		if err := st.Put(ctx, "/bench/put/"+strconv.Itoa(i%1000), value); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkTxn measures a compare-and-swap transaction: check a key's
// version, write it and a second key.
func BenchmarkTxn(b *testing.B) {
	st := storetest.New(b)
	ctx := b.Context()
	const key = "/bench/txn/meta"
	if err := st.Put(ctx, key, []byte("0")); err != nil {
		b.Fatal(err)
	}
	kv, err := st.Get(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	version := kv.Version
	i := 0
	for b.Loop() {
		i++
		v := []byte(strconv.Itoa(i))
		res, err := st.Txn(ctx, []store.Compare{{Key: key, ExpectedVersion: version}},
			[]store.Op{{Type: store.OpPut, Key: key, Value: v}, {Type: store.OpPut, Key: "/bench/txn/status", Value: v}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Committed {
			b.Fatal("transaction not committed")
		}
		version = res.Revision
	}
}

// BenchmarkSaveSnapshot measures a leader's backup of a store holding the
// desired state of 1,000 workloads (2 KiB each): stream the snapshot, sync,
// verify its checksum and database, rename. It reports the file's size.
func BenchmarkSaveSnapshot(b *testing.B) {
	st := storetest.New(b)
	ctx := b.Context()
	value := make([]byte, 2048)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	for i := range 1000 {
		if err := st.Put(ctx, "/kat/workloads/desired/default/w"+strconv.Itoa(i)+"/manifest/workload.kat", value); err != nil {
			b.Fatal(err)
		}
	}
	path := filepath.Join(b.TempDir(), "snap.db")
	var size int64
	for b.Loop() {
		info, err := st.SaveSnapshot(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		size = info.Size
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB")
}

// BenchmarkPutRootInProcess is BenchmarkPutRootTLS with the root client's
// requests served in process (Embedded.ServeInProcess), as a member's own
// leader makes them.
func BenchmarkPutRootInProcess(b *testing.B) {
	emb, dial := authEtcdCerts(b, newTestPKI(b))
	st, leaf := dial(store.RootUser)
	if err := st.EnableAuth(b.Context()); err != nil {
		b.Fatal(err)
	}
	if err := emb.ServeInProcess(st.Client(), leaf.CertPEM); err != nil {
		b.Fatal(err)
	}
	benchPut(b, st)
}
