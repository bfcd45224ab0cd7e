package resources

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// DesiredIndex is an in-memory copy of every workload's desired state
// (/kat/workloads/desired/: metas and manifest files), kept current by a
// watch, with the workloads each Git source owns by directory. The leader's
// loops and the Git sources read it instead of listing etcd, so that a change
// of one workload costs work on that workload only. etcd stays the only
// state: a new index starts from etcd. It is safe for concurrent use; it
// never shows a transaction in part.
//
//	d := resources.NewDesiredIndex(repo.Store())
//	go d.Run(ctx)
//	<-d.Synced()
//	w, ok := d.Workload("default", "web")
type DesiredIndex struct {
	cache *store.Cache[desiredEntry]
	subs  []func(key string)

	mu sync.RWMutex
	// keys holds every workload with a meta, "ns/name".
	keys map[string]struct{}
	// owned is, by Git source and directory, the workloads it owns.
	owned map[string]map[string][]string
	// nOwned counts each source's workloads.
	nOwned map[string]int
}

// desiredEntry is one key of the desired state: a workload's meta, or one
// manifest file.
type desiredEntry struct {
	meta    *api.WorkloadMeta
	data    []byte
	version int64
}

// DesiredWorkload is one workload's desired state as a DesiredIndex holds it.
type DesiredWorkload struct {
	Meta api.WorkloadMeta
	// Version is the meta's version, for a compare-and-swap against it.
	Version int64
	// Files are the manifest files Meta lists, those the index holds.
	Files map[string][]byte
}

// NewDesiredIndex returns an index of st's desired state; nothing is read
// until Run.
func NewDesiredIndex(st store.StateStore) *DesiredIndex {
	d := &DesiredIndex{
		cache: store.NewCache(st, prefixDesired, decodeDesiredEntry),
		keys:  map[string]struct{}{}, owned: map[string]map[string][]string{}, nOwned: map[string]int{},
	}
	d.cache.SetIndex(d.index)
	return d
}

func decodeDesiredEntry(kv store.KV) (desiredEntry, bool) {
	ns, name, file, ok := ParseDesiredKey(kv.Key)
	if !ok || ns == "" || name == "" {
		return desiredEntry{}, false
	}
	if file != "" {
		return desiredEntry{data: kv.Value, version: kv.Version}, true
	}
	var m api.WorkloadMeta
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		return desiredEntry{}, false
	}
	InternMeta(&m)
	return desiredEntry{meta: &m, version: kv.Version}, true
}

// Subscribe makes the index call f with "ns/name" whenever that workload's
// meta or files change (and for every workload of the first listing). Call
// it before Run. f runs under the index's lock: it must not block nor read
// the index.
func (d *DesiredIndex) Subscribe(f func(key string)) { d.subs = append(d.subs, f) }

// Run lists the desired state, then follows it until ctx ends.
func (d *DesiredIndex) Run(ctx context.Context) error { return d.cache.Run(ctx, nil) }

// Synced is closed once the first listing is in the index.
func (d *DesiredIndex) Synced() <-chan struct{} { return d.cache.Synced() }

// WaitRevision returns once the index holds every change up to revision rev,
// or ctx ended.
func (d *DesiredIndex) WaitRevision(ctx context.Context, rev int64) error {
	return d.cache.WaitRevision(ctx, rev)
}

// index keeps keys and owned current with one change; it runs under the
// cache's lock.
func (d *DesiredIndex) index(key string, old, new *desiredEntry) {
	ns, name, _, _ := ParseDesiredKey(key)
	k := ns + "/" + name
	d.mu.Lock()
	if old != nil && old.meta != nil {
		d.disown(k, old.meta.Owner)
		delete(d.keys, k)
	}
	if new != nil && new.meta != nil {
		d.keys[k] = struct{}{}
		if o := new.meta.Owner; o.Kind == api.OwnerGit {
			byPath := d.owned[o.Source]
			if byPath == nil {
				byPath = map[string][]string{}
				d.owned[o.Source] = byPath
			}
			byPath[o.Path] = append(byPath[o.Path], k)
			d.nOwned[o.Source]++
		}
	}
	d.mu.Unlock()
	for _, f := range d.subs {
		f(k)
	}
}

// disown removes workload k from its former owner's directory; d.mu is held.
func (d *DesiredIndex) disown(k string, o api.Owner) {
	if o.Kind != api.OwnerGit {
		return
	}
	byPath := d.owned[o.Source]
	ks := slices.DeleteFunc(byPath[o.Path], func(x string) bool { return x == k })
	if len(ks) == 0 {
		delete(byPath, o.Path)
	} else {
		byPath[o.Path] = ks
	}
	if d.nOwned[o.Source]--; d.nOwned[o.Source] <= 0 {
		delete(d.nOwned, o.Source)
		delete(d.owned, o.Source)
	}
}

// Workload returns the desired state of workload ns/name.
func (d *DesiredIndex) Workload(ns, name string) (DesiredWorkload, bool) {
	var w DesiredWorkload
	ok := false
	d.cache.Read(func(get func(string) (desiredEntry, bool)) {
		e, found := get(MetaKey(ns, name))
		if !found || e.meta == nil {
			return
		}
		w = DesiredWorkload{Meta: *e.meta, Version: e.version, Files: make(map[string][]byte, len(e.meta.Files))}
		for _, f := range e.meta.Files {
			if fe, found := get(ManifestKey(ns, name, f)); found {
				w.Files[f] = fe.data
			}
		}
		ok = true
	})
	return w, ok
}

// Meta returns the meta of workload ns/name.
func (d *DesiredIndex) Meta(ns, name string) (api.WorkloadMeta, bool) {
	e, ok := d.cache.Get(MetaKey(ns, name))
	if !ok || e.meta == nil {
		return api.WorkloadMeta{}, false
	}
	return *e.meta, true
}

// Keys returns every workload's "ns/name", sorted.
func (d *DesiredIndex) Keys() []string {
	d.mu.RLock()
	out := make([]string, 0, len(d.keys))
	for k := range d.keys {
		out = append(out, k)
	}
	d.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Metas returns the meta of every workload.
func (d *DesiredIndex) Metas() []api.WorkloadMeta { return d.metasOf(d.Keys()) }

// Owned returns how many workloads Git source owns.
func (d *DesiredIndex) Owned(source string) int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.nOwned[source]
}

// OwnedAt returns the metas of the workloads Git source owns whose directory
// is path.
func (d *DesiredIndex) OwnedAt(source, path string) []api.WorkloadMeta {
	d.mu.RLock()
	keys := slices.Clone(d.owned[source][path])
	d.mu.RUnlock()
	return d.metasOf(keys)
}

// metasOf returns the metas of those of keys that exist.
func (d *DesiredIndex) metasOf(keys []string) []api.WorkloadMeta {
	out := make([]api.WorkloadMeta, 0, len(keys))
	for _, k := range keys {
		ns, name := SplitKey(k)
		if m, ok := d.Meta(ns, name); ok {
			out = append(out, m)
		}
	}
	return out
}

// OwnedKeys returns the "ns/name" of the workloads Git source owns whose
// directory is path.
func (d *DesiredIndex) OwnedKeys(source, path string) []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.owned[source][path])
}

// SplitKey splits a workload key "ns/name".
func SplitKey(key string) (ns, name string) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}
