package store_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// render prints an event compactly for comparisons.
func render(e store.WatchEvent) string {
	if e.Type == store.EventTypeDelete {
		return "delete " + e.KV.Key
	}
	return fmt.Sprintf("put %s=%s", e.KV.Key, e.KV.Value)
}

// collect reads n events, failing the test if they do not arrive in time.
func collect(t *testing.T, ch <-chan store.WatchEvent, n int) []store.WatchEvent {
	t.Helper()
	var got []store.WatchEvent
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for len(got) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events: %q", len(got), n, renderAll(got))
			}
			got = append(got, e)
		case <-deadline.C:
			t.Fatalf("got %d of %d events before the deadline: %q", len(got), n, renderAll(got))
		}
	}
	return got
}

func renderAll(es []store.WatchEvent) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, render(e))
	}
	return out
}

// expectEvents reads len(want) events and compares them with want.
func expectEvents(t *testing.T, ch <-chan store.WatchEvent, want ...string) []store.WatchEvent {
	t.Helper()
	got := collect(t, ch, len(want))
	if r := renderAll(got); !slices.Equal(r, want) {
		t.Fatalf("events:\n got %q\nwant %q", r, want)
	}
	return got
}

// waitClosed fails the test unless ch is closed (after draining) in time.
func waitClosed(t *testing.T, ch <-chan store.WatchEvent) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline.C:
			t.Fatal("watch channel not closed")
		}
	}
}

func TestWatchKeyOrPrefix(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	tests := []struct {
		name string
		key  string
		want []string
	}{
		{
			name: "prefix sees keys below it",
			key:  "/w/p/",
			want: []string{"put /w/p/a=1", "put /w/p/ab=1", "put /w/p/b/c=1", "delete /w/p/a", "put /w/p/a=final"},
		},
		{
			name: "exact key sees only itself",
			key:  "/w/p/a",
			want: []string{"put /w/p/a=1", "delete /w/p/a", "put /w/p/a=final"},
		},
	}
	chans := make([]<-chan store.WatchEvent, len(tests))
	for i, tc := range tests {
		ch, err := st.Watch(ctx, tc.key, 0)
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	mustPut(t, st, "/w/p/a", "1")
	mustPut(t, st, "/w/p/ab", "1")
	mustPut(t, st, "/w/p/b/c", "1")
	mustPut(t, st, "/w/q", "1")
	if err := st.Delete(ctx, "/w/p/a"); err != nil {
		t.Fatal(err)
	}
	// Last, a change both watches see: anything unexpected comes before it.
	mustPut(t, st, "/w/p/a", "final")
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := expectEvents(t, chans[i], tc.want...)
			del := slices.IndexFunc(got, func(e store.WatchEvent) bool { return e.Type == store.EventTypeDelete })
			if p := got[del].PrevKV; p == nil || string(p.Value) != "1" {
				t.Errorf("delete PrevKV = %+v, want value 1", p)
			}
			if got[del].KV.Version <= got[del-1].KV.Version {
				t.Errorf("delete version %d not after %d", got[del].KV.Version, got[del-1].KV.Version)
			}
		})
	}
}

func TestWatchStartRevision(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	mustPut(t, st, "/h/k", "v1")
	first, err := st.Get(ctx, "/h/k")
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, "/h/k", "v2")
	mustPut(t, st, "/h/k", "v3")
	tests := []struct {
		name  string
		start int64
		want  []string
	}{
		{name: "old revision replays history", start: first.Version, want: []string{"put /h/k=v1", "put /h/k=v2", "put /h/k=v3", "put /h/k=v4"}},
		{name: "revision 1 replays everything", start: 1, want: []string{"put /h/k=v1", "put /h/k=v2", "put /h/k=v3", "put /h/k=v4"}},
		{name: "zero starts now", start: 0, want: []string{"put /h/k=v4"}},
	}
	chans := make([]<-chan store.WatchEvent, len(tests))
	for i, tc := range tests {
		if chans[i], err = st.Watch(ctx, "/h/k", tc.start); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, st, "/h/k", "v4")
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := expectEvents(t, chans[i], tc.want...)
			if len(got) > 1 && (got[1].PrevKV == nil || string(got[1].PrevKV.Value) != "v1") {
				t.Errorf("second event PrevKV = %+v, want v1", got[1].PrevKV)
			}
		})
	}
}

func TestWatchInvalid(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	tests := []struct {
		name  string
		key   string
		start int64
	}{
		{name: "empty key", key: "", start: 0},
		{name: "negative revision", key: "/k", start: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := st.Watch(testCtx(t), tc.key, tc.start); !errors.Is(err, store.ErrInvalidArgument) {
				t.Fatalf("Watch error = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

// TestWatchStartCompacted starts a watch at a revision that is already
// compacted: the watch relists and reports what changed since.
func TestWatchStartCompacted(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	mustPut(t, st, "/sc/a", "1")
	mustPut(t, st, "/sc/b", "1")
	rev, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, "/sc/a", "2")
	mustPut(t, st, "/sc/c", "1")
	mustPut(t, st, "/sc/c", "2")
	now, err := st.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	ch, err := st.Watch(ctx, "/sc/", rev+1)
	if err != nil {
		t.Fatal(err)
	}
	// /sc/b did not change after rev: not reported. /sc/c's history
	// collapses to its current value.
	got := expectEvents(t, ch, "put /sc/a=2", "put /sc/c=2")
	for _, e := range got {
		if e.PrevKV != nil {
			t.Errorf("%s: PrevKV = %+v, want nil after a resync", render(e), e.PrevKV)
		}
	}
	mustPut(t, st, "/sc/d", "1")
	expectEvents(t, ch, "put /sc/d=1")
}

// TestWatchCompactedWhileDisconnected cuts a watcher off from etcd, changes
// and compacts behind its back, and checks that it converges to the exact
// current set of keys once reconnected.
func TestWatchCompactedWhileDisconnected(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	ctx := testCtx(t)
	writer := store.New(emb.Client())
	t.Cleanup(func() { _ = writer.Close() })

	watcher, p := dialThroughProxy(t, ctx, emb)

	for _, k := range []string{"/c/keep", "/c/change", "/c/gone"} {
		mustPut(t, writer, k, "v1")
	}
	ch, err := watcher.Watch(ctx, "/c/", 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, writer, "/c/live", "1")
	expectEvents(t, ch, "put /c/live=1")

	p.cut()
	mustPut(t, writer, "/c/change", "v2")
	mustPut(t, writer, "/c/change", "v3")
	if err := writer.Delete(ctx, "/c/gone"); err != nil {
		t.Fatal(err)
	}
	mustPut(t, writer, "/c/new", "1")
	mustPut(t, writer, "/c/brief", "1")
	if err := writer.Delete(ctx, "/c/brief"); err != nil {
		t.Fatal(err)
	}
	rev, err := writer.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	p.start(t)

	// Changed and new keys as Put with their current value (the v2 step is
	// gone with the history), vanished keys as Delete, untouched keys not at
	// all, and /c/brief, born and dead in the gap, not at all.
	got := expectEvents(t, ch, "put /c/change=v3", "put /c/new=1", "delete /c/gone")
	if got[2].KV.Version < rev {
		t.Errorf("delete version %d, want at least the compaction revision %d", got[2].KV.Version, rev)
	}
	if last := lastFlags(got); last != "--L" {
		t.Errorf("Last flags of the resynchronisation %q, want only the last event's", last)
	}
	mustPut(t, writer, "/c/after", "1")
	expectEvents(t, ch, "put /c/after=1")
}

// lastFlags renders which events are marked Last: "L" or "-" each.
func lastFlags(es []store.WatchEvent) string {
	b := make([]byte, len(es))
	for i, e := range es {
		b[i] = '-'
		if e.Last {
			b[i] = 'L'
		}
	}
	return string(b)
}

// TestWatchMarksTheLastEventOfARevision: the events of one transaction
// share a revision and only the last of them is marked Last; a single put
// is its own last event.
func TestWatchMarksTheLastEventOfARevision(t *testing.T) {
	st := storetest.New(t)
	ctx := testCtx(t)
	mustPut(t, st, "/tx/gone", "1")
	ch, err := st.Watch(ctx, "/tx/", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(ctx, nil, []store.Op{
		{Type: store.OpPut, Key: "/tx/a", Value: []byte("1")},
		{Type: store.OpPut, Key: "/tx/b", Value: []byte("2")},
		{Type: store.OpDelete, Key: "/tx/gone"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	mustPut(t, st, "/tx/c", "3")
	got := expectEvents(t, ch, "put /tx/a=1", "put /tx/b=2", "delete /tx/gone", "put /tx/c=3")
	if last := lastFlags(got); last != "--LL" {
		t.Errorf("Last flags %q, want --LL", last)
	}
	if got[0].KV.Version != got[2].KV.Version || got[3].KV.Version == got[2].KV.Version {
		t.Errorf("revisions %d %d %d %d: the transaction's should be equal, the put's apart",
			got[0].KV.Version, got[1].KV.Version, got[2].KV.Version, got[3].KV.Version)
	}
}

// TestWatchEnds: watches end, and leave no goroutine behind, when their
// context is cancelled or the store closed. It counts the process's
// goroutines, so it never runs beside another test (no t.Parallel: parallel
// tests start only after the sequential ones end).
func TestWatchEnds(t *testing.T) {
	tests := []struct {
		name string
		// end stops the watches and returns.
		end func(cancel context.CancelFunc, st *store.Etcd)
	}{
		{name: "context cancelled", end: func(cancel context.CancelFunc, _ *store.Etcd) { cancel() }},
		{name: "store closed", end: func(_ context.CancelFunc, st *store.Etcd) { _ = st.Close() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			emb := storetest.NewEmbedded(t)
			st := store.New(emb.Client())
			t.Cleanup(func() { _ = st.Close() })
			// Warm up the client's watch machinery before counting.
			wctx, wcancel := context.WithCancel(testCtx(t))
			warm, err := st.Watch(wctx, "/warm", 0)
			if err != nil {
				t.Fatal(err)
			}
			wcancel()
			waitClosed(t, warm)
			settle(t, -1)
			base := runtime.NumGoroutine()

			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			const n = 10
			chans := make([]<-chan store.WatchEvent, n)
			for i := range chans {
				if chans[i], err = st.Watch(ctx, "/end/", 0); err != nil {
					t.Fatal(err)
				}
			}
			mustPut(t, st, "/end/x", "1")
			for _, ch := range chans {
				expectEvents(t, ch, "put /end/x=1")
			}
			if g := runtime.NumGoroutine(); g < base+n {
				t.Fatalf("%d goroutines with %d watches, baseline %d: counting is broken", g, n, base)
			}
			tc.end(cancel, st)
			for _, ch := range chans {
				waitClosed(t, ch)
			}
			settle(t, base)
		})
	}
}

// settle polls until the goroutine count is at most max+2 (slack for etcd's
// own timers), or, for max < 0, until it holds still for one poll.
func settle(t *testing.T, max int) {
	t.Helper()
	last, since := -1, time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := poll.Wait(ctx, func() (bool, error) {
		g := runtime.NumGoroutine()
		if max < 0 {
			if g != last {
				last, since = g, time.Now()
			}
			return time.Since(since) >= 50*time.Millisecond, nil
		}
		return g <= max+2, nil
	})
	if err != nil && max >= 0 {
		t.Fatalf("goroutines did not settle: %d, baseline %d", runtime.NumGoroutine(), max)
	}
}
