package store_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// TestCacheFollowsTheStore: a cache lists what exists, then follows puts and
// deletes, leaves out values its decoder refuses, tells about every changed
// key, and converges again after the history it watches was compacted.
func TestCacheFollowsTheStore(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := t.Context()
	for i := range 3 {
		if err := st.Put(ctx, "/c/k"+strconv.Itoa(i), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Put(ctx, "/other", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c := store.NewCache(st, "/c/", func(kv store.KV) (int, bool) {
		n, err := strconv.Atoi(string(kv.Value))
		return n, err == nil
	})
	var mu sync.Mutex
	changed := map[string]int{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(rctx, func(k string) {
			mu.Lock()
			changed[k]++
			mu.Unlock()
		})
	}()
	select {
	case <-c.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("cache never synced")
	}
	want := func(what string, kv map[string]int) {
		t.Helper()
		polltest.Until(t, 10*time.Second, what, func() bool {
			got, _ := c.Snapshot()
			if len(got) != len(kv) {
				return false
			}
			for k, v := range kv {
				if got[k] != v {
					return false
				}
			}
			return true
		})
	}
	want("the listing", map[string]int{"/c/k0": 0, "/c/k1": 1, "/c/k2": 2})
	if err := st.Put(ctx, "/c/k1", []byte("10")); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "/c/k0"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, "/c/bad", []byte("not a number")); err != nil {
		t.Fatal(err)
	}
	want("puts and deletes", map[string]int{"/c/k1": 10, "/c/k2": 2})
	// A value that later decodes replaces the refused one.
	if err := st.Put(ctx, "/c/bad", []byte("7")); err != nil {
		t.Fatal(err)
	}
	want("a fixed value", map[string]int{"/c/k1": 10, "/c/k2": 2, "/c/bad": 7})
	mu.Lock()
	for k, n := range map[string]int{"/c/k0": 2, "/c/k1": 2, "/c/k2": 1, "/c/bad": 2} {
		if changed[k] != n {
			t.Errorf("%d changes reported for %s, want %d", changed[k], k, n)
		}
	}
	if changed["/other"] != 0 {
		t.Error("a key outside the prefix was reported")
	}
	mu.Unlock()
	if v, ok := c.Get("/c/bad"); !ok || v != 7 {
		t.Errorf("Get(/c/bad) = %d, %v", v, ok)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestCacheStoppedWhileStartingIsNoFailure: a cache whose context ends
// before its first listing returns nil, as after any stop.
func TestCacheStoppedWhileStartingIsNoFailure(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	c := store.NewCache(st, "/x/", func(kv store.KV) (string, bool) { return string(kv.Value), true })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx, nil); err != nil {
		t.Fatalf("Run with an ended context = %v, want nil", err)
	}
}

// TestCacheAppliesTransactionsWhole: the changes of one transaction are in
// the cache together before any of them is reported or waited for, and the
// index hook sees each change with its old and new value.
func TestCacheAppliesTransactionsWhole(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := t.Context()
	if err := st.Put(ctx, "/c/x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	c := store.NewCache(st, "/c/", func(kv store.KV) (int, bool) {
		n, err := strconv.Atoi(string(kv.Value))
		return n, err == nil
	})
	var mu sync.Mutex
	var indexed []string
	c.SetIndex(func(key string, old, new *int) {
		s := key
		for _, v := range []*int{old, new} {
			if v == nil {
				s += " -"
			} else {
				s += " " + strconv.Itoa(*v)
			}
		}
		mu.Lock()
		indexed = append(indexed, s)
		mu.Unlock()
	})
	var partial []string
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = c.Run(rctx, func(k string) {
			_, a := c.Get("/c/a")
			_, b := c.Get("/c/b")
			_, x := c.Get("/c/x")
			if k != "/c/x" && (a != b || a == x) {
				mu.Lock()
				partial = append(partial, k)
				mu.Unlock()
			}
		})
	}()
	<-c.Synced()
	res, err := st.Txn(ctx, nil, []store.Op{
		{Type: store.OpPut, Key: "/c/a", Value: []byte("2")},
		{Type: store.OpPut, Key: "/c/b", Value: []byte("3")},
		{Type: store.OpDelete, Key: "/c/x"},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := c.WaitRevision(wctx, res.Revision); err != nil {
		t.Fatal(err)
	}
	a, okA := c.Get("/c/a")
	b, okB := c.Get("/c/b")
	if _, okX := c.Get("/c/x"); !okA || !okB || okX || a != 2 || b != 3 {
		t.Errorf("after the transaction's revision: a=%d,%v b=%d,%v x present %v", a, okA, b, okB, okX)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(partial) > 0 {
		t.Errorf("keys %v were reported while the cache held part of their transaction", partial)
	}
	want := []string{"/c/x - 1", "/c/a - 2", "/c/b - 3", "/c/x 1 -"}
	if strings.Join(indexed, "\n") != strings.Join(want, "\n") {
		t.Errorf("index saw\n%s\nwant\n%s", strings.Join(indexed, "\n"), strings.Join(want, "\n"))
	}
}
