package store

import (
	"context"
	"fmt"
	"maps"
	"sync"
)

// Cache is an in-memory copy of every key under a prefix, decoded, kept
// current by a watch: what a loop reads on every pass without asking etcd
// (an informer). It is level-triggered like the watch behind it: a watch that
// falls behind a compaction resynchronises, so the copy converges to the
// store's keys whatever events were missed. It applies a transaction's
// changes at once: a reader never sees one in part.
//
//	c := store.NewCache(st, "/kat/nodes/status/", decodeNodeStatus)
//	go c.Run(ctx, func(key string) { reconcile.Poke(wake) })
//	<-c.Synced()
//	st, ok := c.Get("/kat/nodes/status/n1")
type Cache[T any] struct {
	st     StateStore
	prefix string
	decode func(KV) (T, bool)
	index  func(key string, old, new *T)

	synced chan struct{}
	mu     sync.RWMutex
	items  map[string]T
	rev    int64
	// moved is closed and replaced whenever rev moves.
	moved chan struct{}
}

// NewCache returns a cache of the keys under prefix (which ends in "/"),
// each decoded by decode; a key decode refuses (false) is left out. Nothing
// is read until Run.
func NewCache[T any](st StateStore, prefix string, decode func(KV) (T, bool)) *Cache[T] {
	return &Cache[T]{st: st, prefix: prefix, decode: decode, synced: make(chan struct{}), items: map[string]T{}, moved: make(chan struct{})}
}

// SetIndex makes the cache call index, set before Run, with every change it
// applies (old and new are nil when the key was or is absent), under its
// lock and before the revision of the change is reported: an index the
// caller keeps of the values is then as current as WaitRevision says. index
// must not block or call the cache.
func (c *Cache[T]) SetIndex(index func(key string, old, new *T)) { c.index = index }

// Run lists the prefix, then applies the watch's changes until ctx ends, and
// returns nil then. changed, when not nil, is called with every key that was
// listed, put or deleted, after the cache holds the change; it must not
// block. An error means the first listing or the watch could not start.
func (c *Cache[T]) Run(ctx context.Context, changed func(key string)) error {
	kvs, rev, err := c.st.ListWithRevision(ctx, c.prefix)
	if ctx.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		return fmt.Errorf("cache %s: %w", c.prefix, err)
	}
	events, err := c.st.Watch(ctx, c.prefix, rev+1)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cache %s: %w", c.prefix, err)
	}
	c.mu.Lock()
	for _, kv := range kvs {
		c.apply(WatchEvent{Type: EventTypePut, KV: kv})
	}
	c.advance(rev)
	c.mu.Unlock()
	close(c.synced)
	if changed != nil {
		for _, kv := range kvs {
			changed(kv.Key)
		}
	}
	var batch []WatchEvent
	for ev := range events {
		batch = append(batch, ev)
		if !ev.Last {
			continue
		}
		c.mu.Lock()
		var last int64
		for _, e := range batch {
			c.apply(e)
			last = max(last, e.KV.Version)
		}
		c.advance(last)
		c.mu.Unlock()
		if changed != nil {
			for _, e := range batch {
				changed(e.KV.Key)
			}
		}
		batch = batch[:0]
	}
	return nil
}

// apply puts one change into the cache; c.mu is held.
func (c *Cache[T]) apply(ev WatchEvent) {
	old, had := c.items[ev.KV.Key]
	var v T
	ok := false
	if ev.Type != EventTypeDelete {
		v, ok = c.decode(ev.KV)
	}
	if ok {
		c.items[ev.KV.Key] = v
	} else {
		delete(c.items, ev.KV.Key)
	}
	if c.index == nil || (!had && !ok) {
		return
	}
	var oldp, newp *T
	if had {
		oldp = &old
	}
	if ok {
		newp = &v
	}
	c.index(ev.KV.Key, oldp, newp)
}

// advance moves rev forward and wakes WaitRevision; c.mu is held.
func (c *Cache[T]) advance(rev int64) {
	if rev <= c.rev {
		return
	}
	c.rev = rev
	close(c.moved)
	c.moved = make(chan struct{})
}

// WaitRevision returns once the cache holds every change under its prefix up
// to revision rev (for example a write of the caller's, whose revision
// Txn returned), or ctx ended. A loop that writes under the prefix waits for
// its own write before its next pass, so it never decides again from a copy
// that lacks it.
func (c *Cache[T]) WaitRevision(ctx context.Context, rev int64) error {
	for {
		c.mu.RLock()
		cur, moved := c.rev, c.moved
		c.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("wait for revision %d of %s: %w", rev, c.prefix, ctx.Err())
		}
	}
}

// Synced is closed once the first listing is in the cache.
func (c *Cache[T]) Synced() <-chan struct{} { return c.synced }

// Get returns the value of key, and whether the cache holds it.
func (c *Cache[T]) Get(key string) (T, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.items[key]
	return v, ok
}

// Read calls f with a lookup of the cache's keys, all under one read lock:
// what f reads belongs to the same revision. f must not call the cache.
func (c *Cache[T]) Read(f func(get func(key string) (T, bool))) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f(func(key string) (T, bool) {
		v, ok := c.items[key]
		return v, ok
	})
}

// Snapshot returns a copy of the cache's keys and values, and the revision
// of the last change it holds. Values are shared: do not modify them.
func (c *Cache[T]) Snapshot() (map[string]T, int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return maps.Clone(c.items), c.rev
}

// Revision returns the revision of the last change the cache holds: equal
// revisions mean equal contents.
func (c *Cache[T]) Revision() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rev
}

// Len returns the number of keys held.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}
