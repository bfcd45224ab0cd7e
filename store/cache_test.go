package store_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll"
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
		poll.Until(t, 10*time.Second, what, func() bool {
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
