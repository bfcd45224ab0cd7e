package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch retry backoff bounds.
const (
	minRetryDelay = 50 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// errWatchEnded reports an etcd watch channel that closed or was cancelled
// without the store asking for it.
var errWatchEnded = errors.New("store: etcd watch ended")

// Watch streams changes to one key or to a prefix, starting at
// startRevision, until ctx ends or the store is closed; then it closes the
// returned channel. It returns an error only when the watch cannot start
// (invalid arguments, etcd unreachable).
//
// # Key or prefix
//
// A keyOrPrefix that ends in "/" watches every key under it
// ("/kat/nodes/" sees "/kat/nodes/a" and "/kat/nodes/b/x"). Any other
// keyOrPrefix watches exactly that key ("/kat/nodes/a" does not see
// "/kat/nodes/ab").
//
// # Start revision
//
// startRevision 0 means "from now": every change after the call returns is
// delivered. A positive startRevision replays history from that revision, so
// ListWithRevision followed by Watch(rev+1) misses nothing.
//
// # Resilience
//
// A watch that etcd ends on its own (leader loss, connection trouble) is
// re-established from the revision after the last delivered event, with a
// capped, jittered backoff. When the history needed to resume has been
// compacted, the watch resynchronises: it lists the keys again and delivers a
// Put for every key changed since the last delivered revision and a Delete
// for every key that vanished, then resumes watching after the list. Keys
// vanished are those present when the watch started (or reported since by a
// Put) and absent from the new list.
//
// Caveat: a resynchronisation collapses history. Intermediate values of a key
// are skipped (only its current value is delivered, with PrevKV nil), a key
// both created and deleted inside the compacted gap is not reported at all,
// and a Delete carries only Key and, as Version, the revision of the list
// rather than of the deletion. When startRevision itself is already compacted
// at the call, the keys present just before it are unknown, so keys deleted
// between startRevision and the resynchronisation are not reported. Consumers
// that rebuild state level-triggered from the events converge to the exact
// current set of keys either way.
//
// Events are delivered in revision order on an unbuffered channel; a slow
// consumer slows the watch, and Watch never blocks on a send once ctx is done.
// The last event of each revision (of a resynchronisation: its last event) is
// marked Last.
func (s *Etcd) Watch(ctx context.Context, keyOrPrefix string, startRevision int64) (<-chan WatchEvent, error) {
	if keyOrPrefix == "" {
		return nil, fmt.Errorf("watch: %w: empty key", ErrInvalidArgument)
	}
	if startRevision < 0 {
		return nil, fmt.Errorf("watch %q: %w: negative start revision %d", keyOrPrefix, ErrInvalidArgument, startRevision)
	}
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("watch %q: %w", keyOrPrefix, err)
	}
	w := &watcher{
		cli:    s.cli,
		key:    keyOrPrefix,
		prefix: strings.HasSuffix(keyOrPrefix, "/"),
		known:  map[string]struct{}{},
	}
	if err := w.init(ctx, startRevision); err != nil {
		return nil, fmt.Errorf("watch %q: %w", keyOrPrefix, err)
	}
	if err := s.goStart(); err != nil {
		return nil, fmt.Errorf("watch %q: %w", keyOrPrefix, err)
	}
	out := make(chan WatchEvent)
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	go func() {
		defer s.wg.Done()
		defer stop()
		defer cancel()
		w.run(wctx, out)
	}()
	return out, nil
}

// watcher is the state of one Watch call, owned by its goroutine.
type watcher struct {
	cli    *clientv3.Client
	key    string
	prefix bool
	// next is the first revision not yet delivered.
	next int64
	// known holds the keys believed present: those present at the start and
	// those delivered as Put since, minus those delivered as Delete.
	known map[string]struct{}
}

// rangeOpts returns the options selecting the watched key or prefix.
func (w *watcher) rangeOpts(extra ...clientv3.OpOption) []clientv3.OpOption {
	if w.prefix {
		extra = append(extra, clientv3.WithPrefix())
	}
	return extra
}

// init fixes the start revision and the keys present just before it.
func (w *watcher) init(ctx context.Context, start int64) error {
	if start == 0 {
		resp, err := w.cli.Get(ctx, w.key, w.rangeOpts(clientv3.WithKeysOnly())...)
		if err != nil {
			return fmt.Errorf("read start revision: %w", err)
		}
		w.next = resp.Header.Revision + 1
		w.remember(resp.Kvs)
		return nil
	}
	w.next = start
	if start == 1 {
		return nil // nothing existed before revision 1
	}
	resp, err := w.cli.Get(ctx, w.key, w.rangeOpts(clientv3.WithKeysOnly(), clientv3.WithRev(start-1))...)
	switch {
	case err == nil:
		w.remember(resp.Kvs)
	case errors.Is(err, rpctypes.ErrCompacted):
		// Unknown: the first watch fails as compacted and resynchronises.
	case errors.Is(err, rpctypes.ErrFutureRev):
		resp, err = w.cli.Get(ctx, w.key, w.rangeOpts(clientv3.WithKeysOnly())...)
		if err != nil {
			return fmt.Errorf("read keys present: %w", err)
		}
		w.remember(resp.Kvs)
	default:
		return fmt.Errorf("read keys present at revision %d: %w", start-1, err)
	}
	return nil
}

// remember adds listed keys to the known set.
func (w *watcher) remember(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		w.known[string(kv.Key)] = struct{}{}
	}
}

// run delivers events until ctx ends, then closes out.
func (w *watcher) run(ctx context.Context, out chan<- WatchEvent) {
	defer close(out)
	delay := minRetryDelay
	for ctx.Err() == nil && w.cli.Ctx().Err() == nil {
		before := w.next
		err := w.stream(ctx, out)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpctypes.ErrCompacted) {
			err = w.resync(ctx, out)
			if err == nil {
				delay = minRetryDelay
				continue
			}
		}
		if w.next != before {
			delay = minRetryDelay
		}
		if !sleepCtx(ctx, jitter(delay)) {
			return
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// stream runs one etcd watch from w.next and delivers its events. It returns
// why the etcd watch ended.
func (w *watcher) stream(ctx context.Context, out chan<- WatchEvent) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.cli.Watch(wctx, w.key, w.rangeOpts(clientv3.WithRev(w.next), clientv3.WithPrevKV())...)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return errWatchEnded
			}
			if err := wr.Err(); err != nil {
				return err
			}
			if wr.Canceled {
				return errWatchEnded
			}
			for i, ev := range wr.Events {
				e := WatchEvent{Type: EventTypePut, KV: fromPB(ev.Kv)}
				if ev.Type == clientv3.EventTypeDelete {
					e.Type = EventTypeDelete
					e.KV = KV{Key: string(ev.Kv.Key), Version: ev.Kv.ModRevision}
				}
				if ev.PrevKv != nil {
					p := fromPB(ev.PrevKv)
					e.PrevKV = &p
				}
				// etcd sends a revision's events in one response.
				e.Last = i == len(wr.Events)-1 || wr.Events[i+1].Kv.ModRevision != ev.Kv.ModRevision
				if !w.send(ctx, out, e) {
					return ctx.Err()
				}
				w.next = ev.Kv.ModRevision + 1
			}
		}
	}
}

// resync lists the watched keys after a compaction and delivers the
// difference from what the consumer has seen.
func (w *watcher) resync(ctx context.Context, out chan<- WatchEvent) error {
	resp, err := w.cli.Get(ctx, w.key, w.rangeOpts(clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))...)
	if err != nil {
		return fmt.Errorf("relist %q after compaction: %w", w.key, err)
	}
	rev := resp.Header.Revision
	present := make(map[string]struct{}, len(resp.Kvs))
	var evs []WatchEvent
	for _, kv := range resp.Kvs {
		present[string(kv.Key)] = struct{}{}
		if kv.ModRevision >= w.next {
			evs = append(evs, WatchEvent{Type: EventTypePut, KV: fromPB(kv)})
		}
	}
	var gone []string
	for k := range w.known {
		if _, ok := present[k]; !ok {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		evs = append(evs, WatchEvent{Type: EventTypeDelete, KV: KV{Key: k, Version: rev}})
	}
	// The difference is one change, as of the listing's revision.
	if len(evs) > 0 {
		evs[len(evs)-1].Last = true
	}
	for _, e := range evs {
		if !w.send(ctx, out, e) {
			return ctx.Err()
		}
	}
	w.known = present
	w.next = rev + 1
	return nil
}

// send delivers e unless ctx ends first, and keeps the known set current.
func (w *watcher) send(ctx context.Context, out chan<- WatchEvent, e WatchEvent) bool {
	select {
	case out <- e:
	case <-ctx.Done():
		return false
	}
	if e.Type == EventTypeDelete {
		delete(w.known, e.KV.Key)
	} else {
		w.known[e.KV.Key] = struct{}{}
	}
	return true
}

// sleepCtx waits for d or until ctx ends, and reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter spreads d by ±20% so that retries from many watchers do not align.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}
