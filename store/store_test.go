package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// testCtx returns a context bounded well under the package's time budget.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t testing.TB, st store.StateStore, key, value string) {
	t.Helper()
	if err := st.Put(testCtx(t), key, []byte(value)); err != nil {
		t.Fatal(err)
	}
}

func TestPutGetDelete(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	tests := []struct {
		name      string
		setup     func(t *testing.T)
		key       string
		wantValue string
		wantErr   error
	}{
		{
			name:      "put then get",
			setup:     func(t *testing.T) { t.Helper(); mustPut(t, st, "/crud/a", "1") },
			key:       "/crud/a",
			wantValue: "1",
		},
		{
			name: "overwrite",
			setup: func(t *testing.T) {
				t.Helper()
				mustPut(t, st, "/crud/b", "1")
				mustPut(t, st, "/crud/b", "2")
			},
			key:       "/crud/b",
			wantValue: "2",
		},
		{
			name:    "missing key",
			key:     "/crud/missing",
			wantErr: store.ErrNotFound,
		},
		{
			name: "deleted key",
			setup: func(t *testing.T) {
				t.Helper()
				mustPut(t, st, "/crud/c", "1")
				if err := st.Delete(ctx, "/crud/c"); err != nil {
					t.Fatal(err)
				}
			},
			key:     "/crud/c",
			wantErr: store.ErrNotFound,
		},
		{
			name: "delete of a missing key is not an error",
			setup: func(t *testing.T) {
				t.Helper()
				if err := st.Delete(ctx, "/crud/never"); err != nil {
					t.Fatal(err)
				}
			},
			key:     "/crud/never",
			wantErr: store.ErrNotFound,
		},
		{
			name:    "empty key",
			key:     "",
			wantErr: store.ErrInvalidArgument,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			kv, err := st.Get(ctx, tc.key)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Get(%q) error = %v, want %v", tc.key, err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if string(kv.Value) != tc.wantValue || kv.Key != tc.key {
				t.Fatalf("Get(%q) = %q=%q, want %q", tc.key, kv.Key, kv.Value, tc.wantValue)
			}
			if kv.Version <= 0 || kv.CreateRevision <= 0 || kv.CreateRevision > kv.Version {
				t.Fatalf("Get(%q) revisions: version %d, create %d", tc.key, kv.Version, kv.CreateRevision)
			}
		})
	}
}

func TestGetErrorNamesKey(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	_, err := st.Get(testCtx(t), "/named/key")
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get error = %v, want ErrNotFound", err)
	}
	if want := `get key "/named/key": store: key not found`; err.Error() != want {
		t.Fatalf("Get error = %q, want %q", err, want)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	// Written out of order on purpose.
	for _, k := range []string{"/l/b", "/l/a/2", "/l/c", "/l/a/1", "/lx", "/m"} {
		mustPut(t, st, k, "v"+k)
	}
	tests := []struct {
		name   string
		prefix string
		want   []string
	}{
		{name: "prefix with slash", prefix: "/l/", want: []string{"/l/a/1", "/l/a/2", "/l/b", "/l/c"}},
		{name: "nested prefix", prefix: "/l/a/", want: []string{"/l/a/1", "/l/a/2"}},
		{name: "prefix without slash matches siblings", prefix: "/l", want: []string{"/l/a/1", "/l/a/2", "/l/b", "/l/c", "/lx"}},
		{name: "no match", prefix: "/nothing/", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kvs, rev, err := st.ListWithRevision(ctx, tc.prefix)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range kvs {
				got = append(got, kv.Key)
				if string(kv.Value) != "v"+kv.Key {
					t.Errorf("value of %q = %q", kv.Key, kv.Value)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
			}
			cur, err := st.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rev != cur {
				t.Fatalf("list revision %d, store revision %d", rev, cur)
			}
			if n, err := st.Count(ctx, tc.prefix); err != nil || n != int64(len(tc.want)) {
				t.Errorf("Count(%q) = %d, %v; want %d", tc.prefix, n, err, len(tc.want))
			}
			for _, n := range []int{0, 1, 2, 10} {
				keys, err := st.FirstKeys(ctx, tc.prefix, n)
				want := tc.want[:min(n, len(tc.want))]
				if err != nil || !slices.Equal(keys, want) && len(keys)+len(want) > 0 {
					t.Errorf("FirstKeys(%q, %d) = %q, %v; want %q", tc.prefix, n, keys, err, want)
				}
			}
		})
	}
}

// TestScanPagesAtOneRevision: a scan longer than a page sees every key in
// order, all at the revision it started at, whatever is written meanwhile,
// and stops at fn's error.
func TestScanPagesAtOneRevision(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	const n = 1234 // two full pages and a part
	var want []string
	for i := 0; i < n; i += 100 {
		var ops []store.Op
		for j := i; j < min(i+100, n); j++ {
			k := fmt.Sprintf("/s/k%04d", j)
			want = append(want, k)
			ops = append(ops, store.Op{Type: store.OpPut, Key: k, Value: []byte("v" + k)})
		}
		if ok, err := st.DoTransaction(ctx, nil, ops, nil); err != nil || !ok {
			t.Fatalf("write keys: %v, %v", ok, err)
		}
	}
	before, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rev, err := st.Scan(ctx, "/s/", func(kv store.KV) error {
		if len(got) == 0 {
			// Written after the scan's first page was read: not seen.
			mustPut(t, st, "/s/k1000", "changed")
			mustPut(t, st, "/s/zzz", "new")
		}
		if string(kv.Value) != "v"+kv.Key {
			t.Errorf("value of %q = %q, want the one at the scan's revision", kv.Key, kv.Value)
		}
		got = append(got, kv.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || rev != before {
		t.Fatalf("scan saw %d keys (first %q, last %q) at revision %d; want %d keys at %d", len(got), got[0], got[len(got)-1], rev, n, before)
	}
	stop := errors.New("enough")
	calls := 0
	if _, err := st.Scan(ctx, "/s/", func(store.KV) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("scan whose fn fails: %v after %d calls, want %v after 1", err, calls, stop)
	}
}

func TestDoTransaction(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	version := func(t *testing.T, key string) int64 {
		t.Helper()
		kv, err := st.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return kv.Version
	}
	value := func(t *testing.T, key string) string {
		t.Helper()
		kv, err := st.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return "<absent>"
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(kv.Value)
	}
	tests := []struct {
		name string
		// prepare writes initial state and returns the transaction.
		prepare       func(t *testing.T) (checks []store.Compare, onSuccess, onFailure []store.Op)
		wantCommitted bool
		wantErr       error
		// want maps keys to their value after the transaction.
		want map[string]string
	}{
		{
			name: "create if absent, absent",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				return []store.Compare{{Key: "/t/new", ExpectedVersion: 0}},
					[]store.Op{{Type: store.OpPut, Key: "/t/new", Value: []byte("created")}}, nil
			},
			wantCommitted: true,
			want:          map[string]string{"/t/new": "created"},
		},
		{
			name: "create if absent, present runs failure branch",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				mustPut(t, st, "/t/exists", "old")
				return []store.Compare{{Key: "/t/exists", ExpectedVersion: 0}},
					[]store.Op{{Type: store.OpPut, Key: "/t/exists", Value: []byte("new")}},
					[]store.Op{{Type: store.OpPut, Key: "/t/conflict", Value: []byte("seen")}}
			},
			wantCommitted: false,
			want:          map[string]string{"/t/exists": "old", "/t/conflict": "seen"},
		},
		{
			name: "compare on current version",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				mustPut(t, st, "/t/cas", "1")
				return []store.Compare{{Key: "/t/cas", ExpectedVersion: version(t, "/t/cas")}},
					[]store.Op{{Type: store.OpPut, Key: "/t/cas", Value: []byte("2")}}, nil
			},
			wantCommitted: true,
			want:          map[string]string{"/t/cas": "2"},
		},
		{
			name: "compare on stale version",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				mustPut(t, st, "/t/stale", "1")
				v := version(t, "/t/stale")
				mustPut(t, st, "/t/stale", "changed by someone else")
				return []store.Compare{{Key: "/t/stale", ExpectedVersion: v}},
					[]store.Op{{Type: store.OpPut, Key: "/t/stale", Value: []byte("mine")}},
					[]store.Op{{Type: store.OpDelete, Key: "/t/stale-marker"}}
			},
			wantCommitted: false,
			want:          map[string]string{"/t/stale": "changed by someone else"},
		},
		{
			name: "every check must hold",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				mustPut(t, st, "/t/m1", "1")
				return []store.Compare{
						{Key: "/t/m1", ExpectedVersion: version(t, "/t/m1")},
						{Key: "/t/m2", ExpectedVersion: 12345},
					},
					[]store.Op{{Type: store.OpDelete, Key: "/t/m1"}}, nil
			},
			wantCommitted: false,
			want:          map[string]string{"/t/m1": "1"},
		},
		{
			name: "delete prefix removes only the prefix",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				for _, k := range []string{"/t/dp/a", "/t/dp/b/c", "/t/dpx"} {
					mustPut(t, st, k, "x")
				}
				return nil, []store.Op{
					{Type: store.OpDeletePrefix, Key: "/t/dp/"},
					{Type: store.OpPut, Key: "/t/dp-done", Value: []byte("yes")},
				}, nil
			},
			wantCommitted: true,
			want:          map[string]string{"/t/dp/a": "<absent>", "/t/dp/b/c": "<absent>", "/t/dpx": "x", "/t/dp-done": "yes"},
		},
		{
			name: "empty delete prefix is refused",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				mustPut(t, st, "/t/survivor", "x")
				return nil, []store.Op{{Type: store.OpDeletePrefix, Key: ""}}, nil
			},
			wantErr: store.ErrInvalidArgument,
			want:    map[string]string{"/t/survivor": "x"},
		},
		{
			name: "unknown op type is refused",
			prepare: func(t *testing.T) ([]store.Compare, []store.Op, []store.Op) {
				t.Helper()
				return nil, nil, []store.Op{{Type: store.OpType(42), Key: "/t/x"}}
			},
			wantErr: store.ErrInvalidArgument,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checks, onSuccess, onFailure := tc.prepare(t)
			committed, err := st.DoTransaction(ctx, checks, onSuccess, onFailure)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("DoTransaction error = %v, want %v", err, tc.wantErr)
			}
			if committed != tc.wantCommitted {
				t.Fatalf("committed = %v, want %v", committed, tc.wantCommitted)
			}
			for k, want := range tc.want {
				if got := value(t, k); got != want {
					t.Errorf("after transaction %q = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestTxnResults(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	mustPut(t, st, "/r/a", "1")
	mustPut(t, st, "/r/p/1", "x")
	mustPut(t, st, "/r/p/2", "x")
	res, err := st.Txn(ctx, nil, []store.Op{
		{Type: store.OpGet, Key: "/r/a"},
		{Type: store.OpGet, Key: "/r/missing"},
		{Type: store.OpDeletePrefix, Key: "/r/p/"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || len(res.Results) != 3 {
		t.Fatalf("result = %+v", res)
	}
	if kv := res.Results[0].KV; kv == nil || string(kv.Value) != "1" {
		t.Errorf("get /r/a = %+v", kv)
	}
	if res.Results[1].KV != nil {
		t.Errorf("get /r/missing = %+v, want nil", res.Results[1].KV)
	}
	if res.Results[2].Deleted != 2 {
		t.Errorf("deleted = %d, want 2", res.Results[2].Deleted)
	}
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != rev {
		t.Errorf("txn revision %d, store revision %d", res.Revision, rev)
	}
}

func TestLeaseKeys(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	lease, err := st.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	kaDone := make(chan error, 1)
	go func() { kaDone <- st.KeepAlive(kctx, lease) }()
	if err := st.PutWithLease(ctx, "/lease/k", []byte("v"), lease); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "/lease/k"); err != nil {
		t.Fatal(err)
	}
	if err := st.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "/lease/k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get after revoke error = %v, want ErrNotFound", err)
	}
	select {
	case err := <-kaDone:
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("KeepAlive = %v, want ErrLeaseLost", err)
		}
	case <-ctx.Done():
		t.Fatal("KeepAlive did not return after the lease was revoked")
	}
	stop()
}

func TestStoreClose(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	st := store.New(emb.Client())
	ctx := testCtx(t)
	mustPut(t, st, "/close/a", "1")
	for i := range 2 {
		if err := st.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if err := st.Put(ctx, "/close/b", nil); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Put after Close error = %v, want ErrClosed", err)
	}
	// The client is not owned by the store: it still works.
	if _, err := emb.Client().Get(ctx, "/close/a"); err != nil {
		t.Fatalf("client after store Close: %v", err)
	}
}

// TestPrefixCompare checks the "no key under this prefix" fence that lets a
// delete refuse to race a create under the prefix.
func TestPrefixCompare(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	empty := []store.Compare{{Key: "/ns/a/", Prefix: true}}
	marker := []store.Op{{Type: store.OpPut, Key: "/marker", Value: []byte("x")}}
	if ok, err := st.DoTransaction(ctx, empty, marker, nil); err != nil || !ok {
		t.Fatalf("empty prefix: committed=%v err=%v, want committed", ok, err)
	}
	mustPut(t, st, "/ns/a/w1", "1")
	mustPut(t, st, "/ns/ab", "not under /ns/a/")
	if ok, err := st.DoTransaction(ctx, empty, marker, nil); err != nil || ok {
		t.Fatalf("prefix holding a key: committed=%v err=%v, want not committed", ok, err)
	}
	if ok, err := st.DoTransaction(ctx, []store.Compare{{Key: "/ns/b/", Prefix: true}}, marker, nil); err != nil || !ok {
		t.Fatalf("a sibling prefix: committed=%v err=%v, want committed", ok, err)
	}
}
