package leader

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// factKind names one kind of fact the leader's loops read; a loop subscribes
// to the kinds it decides from and is woken only by changes to those.
type factKind int

const (
	factDesired factKind = iota
	factAssignments
	// factInstances changes when a node reports a different set or state of
	// instances; a heartbeat that changes nothing else does not count.
	factInstances
	factAppSources
	factBuilds
	factSources
	factStatuses
	numFactKinds
)

// desiredEntry is one key under /kat/workloads/desired/: a workload's meta
// or one of its manifest files.
type desiredEntry struct {
	ns, name string
	file     string // "" for the meta
	meta     resources.WorkloadMeta
	data     []byte
	version  int64
}

// storedStatus is a workload's status as stored, with its version for a
// compare-and-swap.
type storedStatus struct {
	status  resources.WorkloadStatus
	version int64
}

// view is the leader's in-memory copy of the facts its loops decide from,
// kept current by watches (store.Cache), and the parsed specs. Loops read
// consistent-enough snapshots of it instead of listing etcd on every pass;
// etcd stays the only state: a new term builds a new view from etcd.
type view struct {
	specs    *specCache
	desired  *store.Cache[desiredEntry]
	assigns  *store.Cache[resources.Assignment]
	nodes    *store.Cache[resources.NodeStatus]
	apps     *store.Cache[resources.AppSource]
	builds   *store.Cache[build.Record]
	sources  *store.Cache[resources.SourceStatus]
	statuses *store.Cache[storedStatus]

	mu     sync.Mutex
	subs   [numFactKinds][]chan struct{}
	instFP map[string]uint64 // node status key -> fingerprint of its instances

	// wlMu guards the workloads assembled at desired revision wlRev.
	wlMu  sync.Mutex
	wl    []workload
	wlRev int64
}

func newView(st store.StateStore) *view {
	return &view{
		specs:    newSpecCache(),
		desired:  store.NewCache(st, resources.DesiredRootPrefix(), decodeDesired),
		assigns:  store.NewCache(st, resources.AssignmentsPrefix(), decodeJSON[resources.Assignment]),
		nodes:    store.NewCache(st, resources.NodeStatusPrefix(), decodeJSON[resources.NodeStatus]),
		apps:     store.NewCache(st, resources.AppSourcesPrefix(), decodeJSON[resources.AppSource]),
		builds:   store.NewCache(st, resources.BuildsPrefix(), decodeJSON[build.Record]),
		sources:  store.NewCache(st, resources.SourcesPrefix(), decodeSourceStatus),
		statuses: store.NewCache(st, resources.StatusPrefix(), decodeStatus),
		instFP:   map[string]uint64{},
	}
}

func decodeJSON[T any](kv store.KV) (T, bool) {
	var v T
	return v, json.Unmarshal(kv.Value, &v) == nil
}

func decodeDesired(kv store.KV) (desiredEntry, bool) {
	ns, name, file, ok := resources.ParseDesiredKey(kv.Key)
	if !ok {
		return desiredEntry{}, false
	}
	e := desiredEntry{ns: ns, name: name, file: file, version: kv.Version}
	if file != "" {
		e.data = kv.Value
		return e, true
	}
	return e, json.Unmarshal(kv.Value, &e.meta) == nil
}

func decodeSourceStatus(kv store.KV) (resources.SourceStatus, bool) {
	if !strings.HasSuffix(kv.Key, "/status") {
		return resources.SourceStatus{}, false
	}
	return decodeJSON[resources.SourceStatus](kv)
}

func decodeStatus(kv store.KV) (storedStatus, bool) {
	st, ok := decodeJSON[resources.WorkloadStatus](kv)
	return storedStatus{status: st, version: kv.Version}, ok
}

// subscribe returns a one-slot channel poked whenever a fact of one of kinds
// changes. Subscribe before run.
func (v *view) subscribe(kinds ...factKind) <-chan struct{} {
	ch := make(chan struct{}, 1)
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range kinds {
		v.subs[k] = append(v.subs[k], ch)
	}
	return ch
}

func (v *view) notify(k factKind) {
	v.mu.Lock()
	subs := v.subs[k]
	v.mu.Unlock()
	for _, ch := range subs {
		reconcile.Poke(ch)
	}
}

// run keeps every cache current until ctx ends.
func (v *view) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	on := func(k factKind) func(string) { return func(string) { v.notify(k) } }
	g.Go(func() error { return v.desired.Run(ctx, on(factDesired)) })
	g.Go(func() error { return v.assigns.Run(ctx, on(factAssignments)) })
	g.Go(func() error { return v.nodes.Run(ctx, v.nodeChanged) })
	g.Go(func() error { return v.apps.Run(ctx, on(factAppSources)) })
	g.Go(func() error { return v.builds.Run(ctx, on(factBuilds)) })
	g.Go(func() error { return v.sources.Run(ctx, on(factSources)) })
	g.Go(func() error { return v.statuses.Run(ctx, on(factStatuses)) })
	return g.Wait()
}

// nodeChanged wakes the instance subscribers only when the node's reported
// instances changed: a heartbeat that only moves the timestamp or the
// resources wakes no pass.
func (v *view) nodeChanged(key string) {
	st, ok := v.nodes.Get(key)
	var fp uint64
	if ok {
		fp = instancesFingerprint(st.WorkloadInstances)
	}
	v.mu.Lock()
	old, had := v.instFP[key]
	if ok {
		v.instFP[key] = fp
	} else {
		delete(v.instFP, key)
	}
	v.mu.Unlock()
	if had != ok || old != fp {
		v.notify(factInstances)
	}
}

// instancesFingerprint hashes the instance reports of a node.
func instancesFingerprint(is []resources.InstanceStatus) uint64 {
	h := fnv.New64a()
	for _, i := range is {
		b, _ := json.Marshal(i)
		_, _ = h.Write(b)
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

// waitSynced returns once every cache holds its first listing, or ctx ended.
func (v *view) waitSynced(ctx context.Context) error {
	for _, ch := range []<-chan struct{}{v.desired.Synced(), v.assigns.Synced(), v.nodes.Synced(), v.apps.Synced(),
		v.builds.Synced(), v.sources.Synced(), v.statuses.Synced()} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// workload is one workload's desired state with its parsed spec.
type workload struct {
	Meta        resources.WorkloadMeta
	MetaVersion int64
	Files       map[string][]byte
	// Spec is nil while the files do not parse to the meta's spec hash (a
	// pass between a transaction's keys).
	Spec *spec
}

// Key is "ns/name".
func (w workload) Key() string { return w.Meta.Namespace + "/" + w.Meta.Name }

// workloads returns every workload's desired state, sorted by namespace and
// name, with specs from the cache (parsed only on a new spec hash), and
// forgets the specs no workload uses any more. It assembles them again only
// when the desired state changed since the last call; the slice and its
// workloads are shared: do not modify them.
func (v *view) workloads() []workload {
	v.wlMu.Lock()
	defer v.wlMu.Unlock()
	if v.wl != nil && v.desired.Revision() == v.wlRev {
		return v.wl
	}
	entries, rev := v.desired.Snapshot()
	byKey := map[string]*workload{}
	for _, e := range entries {
		k := e.ns + "/" + e.name
		w := byKey[k]
		if w == nil {
			w = &workload{Files: map[string][]byte{}}
			byKey[k] = w
		}
		if e.file == "" {
			w.Meta, w.MetaVersion = e.meta, e.version
		} else {
			w.Files[e.file] = e.data
		}
	}
	out := make([]workload, 0, len(byKey))
	inUse := make(map[string]bool, len(byKey))
	for _, w := range byKey {
		if w.MetaVersion == 0 {
			continue // manifests without their meta: a transaction half seen
		}
		w.Spec = v.specs.get(w.Meta, w.Files)
		inUse[w.Meta.SpecHash] = true
		out = append(out, *w)
	}
	v.specs.keepOnly(inUse)
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	if !halfSeen(out) {
		v.wl, v.wlRev = out, rev
	}
	return out
}

// halfSeen reports whether a workload's files are missing or do not match its
// meta yet (a transaction seen in part): such a list is not kept.
func halfSeen(ws []workload) bool {
	for _, w := range ws {
		if w.Spec == nil {
			return true
		}
	}
	return false
}

// assignments returns every assignment, sorted by key.
func (v *view) assignments() []resources.Assignment {
	m, _ := v.assigns.Snapshot()
	out := make([]resources.Assignment, 0, len(m))
	for _, a := range m {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}

// reported returns the agents' latest report of every instance, by ID.
func (v *view) reported() map[string]resources.InstanceStatus {
	m, _ := v.nodes.Snapshot()
	out := map[string]resources.InstanceStatus{}
	for _, n := range m {
		for _, is := range n.WorkloadInstances {
			out[is.InstanceID] = is
		}
	}
	return out
}

// appSources returns the app-source records by "ns/name".
func (v *view) appSources() map[string]resources.AppSource {
	m, _ := v.apps.Snapshot()
	out := make(map[string]resources.AppSource, len(m))
	for _, a := range m {
		out[a.Namespace+"/"+a.Workload] = a
	}
	return out
}
