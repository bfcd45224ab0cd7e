package leader

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// viewIndex holds what the view's caches hold, by workload: kept by the
// caches' hooks (under each cache's lock, so as current as the cache), read
// by the loops. Values stay in the caches; the index holds keys, apart from
// the small instance reports.
type viewIndex struct {
	mu sync.RWMutex
	// assigned is, by workload, the keys of its assignments.
	assigned map[string]map[string]struct{}
	// instWorkload is the workload of each assigned instance ID.
	instWorkload map[string]string
	// slots counts the assignments holding each user-namespace slot.
	slots map[int]int
	// builds is, by workload, the keys of its build records.
	builds map[string]map[string]struct{}
	// reports are the agents' latest reports, by instance ID.
	reports map[string]instanceReport
	// nodeInstances are the instance IDs each node status key reports.
	nodeInstances map[string][]string
	// pathErrs are the Git sources' path errors, by source "\x00" path.
	pathErrs map[string]api.PathError
	// usage is what the assignments on each node request.
	usage map[string]*nodeUsage
	// addrs are the overlay addresses held on each node.
	addrs addressHolds
}

// instanceReport is one instance as a node reported it, with a fingerprint
// of the report to tell a change from a repeat.
type instanceReport struct {
	node   string
	fp     uint64
	status api.InstanceStatus
}

func newViewIndex() viewIndex {
	return viewIndex{
		assigned: map[string]map[string]struct{}{}, instWorkload: map[string]string{}, slots: map[int]int{},
		builds: map[string]map[string]struct{}{}, reports: map[string]instanceReport{},
		nodeInstances: map[string][]string{}, pathErrs: map[string]api.PathError{},
		usage: map[string]*nodeUsage{}, addrs: newAddressHolds(),
	}
}

func addKey(m map[string]map[string]struct{}, group, key string) {
	s := m[group]
	if s == nil {
		s = map[string]struct{}{}
		m[group] = s
	}
	s[key] = struct{}{}
}

func removeKey(m map[string]map[string]struct{}, group, key string) {
	delete(m[group], key)
	if len(m[group]) == 0 {
		delete(m, group)
	}
}

// assignmentChanged is the assignments cache's hook.
func (v *view) assignmentChanged(key string, old, new *api.Assignment) {
	var dirty []string
	v.idx.mu.Lock()
	for i, a := range []*api.Assignment{old, new} {
		if a == nil {
			continue
		}
		k := a.Namespace + "/" + a.Workload
		dirty = append(dirty, k)
		n := 1
		if i == 0 {
			n = -1
			removeKey(v.idx.assigned, k, key)
			delete(v.idx.instWorkload, a.InstanceID)
		} else {
			addKey(v.idx.assigned, k, key)
			v.idx.instWorkload[a.InstanceID] = k
		}
		v.idx.addUsage(a, n)
		if a.IP.IsValid() {
			v.idx.addrs.set(a.Node, a.IP, heldByAssignment, n > 0, v.now())
		}
		if a.UserNSSlot != nil {
			if v.idx.slots[*a.UserNSSlot] += n; v.idx.slots[*a.UserNSSlot] <= 0 {
				delete(v.idx.slots, *a.UserNSSlot)
			}
		}
	}
	v.idx.mu.Unlock()
	v.markDirty(factAssignments, dirty...)
}

// nodeChanged is the node statuses cache's hook: it marks dirty the
// workloads whose instances the node reports differently, so a heartbeat
// that only moves the timestamp wakes no pass; a change of the node's
// allocatable resources or GPUs marks every workload for placement.
func (v *view) nodeChanged(key string, old, new *api.NodeStatus) {
	if nodeResourcesChanged(old, new) {
		v.markAll(factNodes)
		reconcile.Poke(v.beatWake) // a departed node may be back
	}
	next := map[string]instanceReport{}
	if new != nil {
		for _, is := range new.WorkloadInstances {
			next[is.InstanceID] = instanceReport{node: key, fp: instanceFingerprint(is), status: is}
		}
	}
	var dirty []string
	v.idx.mu.Lock()
	workloadOf := func(r instanceReport) {
		if k, ok := v.idx.instWorkload[r.status.InstanceID]; ok {
			dirty = append(dirty, k)
		}
		dirty = append(dirty, r.status.Namespace+"/"+r.status.WorkloadName)
	}
	prev := map[string]instanceReport{}
	for _, id := range v.idx.nodeInstances[key] {
		if r, ok := v.idx.reports[id]; ok && r.node == key {
			prev[id] = r
			delete(v.idx.reports, id)
		}
	}
	for id, p := range prev {
		if _, ok := next[id]; !ok {
			workloadOf(p)
		}
	}
	ids := make([]string, 0, len(next))
	for id, r := range next {
		if p, ok := prev[id]; !ok || p.fp != r.fp {
			workloadOf(r)
		}
		v.idx.reports[id] = r
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		delete(v.idx.nodeInstances, key)
	} else {
		v.idx.nodeInstances[key] = ids
	}
	v.idx.mu.Unlock()
	slices.Sort(dirty)
	v.markDirty(factInstances, slices.Compact(dirty)...)
}

// instanceFingerprint hashes an instance report.
func instanceFingerprint(is api.InstanceStatus) uint64 {
	h := fnv.New64a()
	b, _ := json.Marshal(is)
	_, _ = h.Write(b)
	return h.Sum64()
}

// buildChanged is the build records cache's hook; a record's key is
// /kat/builds/{ns}/{name}/{commit12}/{node}.
func (v *view) buildChanged(key string, _, new *api.Build) {
	parts := strings.SplitN(strings.TrimPrefix(key, resources.BuildsPrefix()), "/", 3)
	if len(parts) < 3 {
		return
	}
	k := parts[0] + "/" + parts[1]
	v.idx.mu.Lock()
	if new != nil {
		addKey(v.idx.builds, k, key)
	} else {
		removeKey(v.idx.builds, k, key)
	}
	v.idx.mu.Unlock()
	v.markDirty(factBuilds, k)
}

// sourceChanged is the source statuses cache's hook: it marks dirty the
// workloads of the directories whose path error changed, not every workload
// of the source.
func (v *view) sourceChanged(key string, old, new *api.SourceStatus) {
	src := sourceName(key)
	errs := func(st *api.SourceStatus) map[string]api.PathError {
		m := map[string]api.PathError{}
		if st != nil {
			for _, pe := range st.PathErrors {
				m[pe.Path] = pe
			}
		}
		return m
	}
	before, after := errs(old), errs(new)
	var changed []string
	v.idx.mu.Lock()
	for p := range before {
		if _, ok := after[p]; !ok {
			delete(v.idx.pathErrs, src+"\x00"+p)
			changed = append(changed, p)
		}
	}
	for p, pe := range after {
		if b, ok := before[p]; !ok || b != pe {
			changed = append(changed, p)
		}
		v.idx.pathErrs[src+"\x00"+p] = pe
	}
	v.idx.mu.Unlock()
	var dirty []string
	for _, p := range changed {
		dirty = append(dirty, v.desired.OwnedKeys(src, p)...)
	}
	v.markDirty(factSources, dirty...)
}

// sourceName is the name in a source key /kat/sources/{name}/status.
func sourceName(key string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(key, resources.SourcesPrefix()), "/")
	return name
}

// assignmentsOf returns workload key's assignments, sorted by key.
func (v *view) assignmentsOf(key string) []api.Assignment {
	v.idx.mu.RLock()
	keys := slices.Sorted(maps.Keys(v.idx.assigned[key]))
	v.idx.mu.RUnlock()
	out := make([]api.Assignment, 0, len(keys))
	for _, k := range keys {
		if a, ok := v.assigns.Get(k); ok {
			out = append(out, a)
		}
	}
	return out
}

// assignedKeys returns the workloads that have assignments.
func (v *view) assignedKeys() []string {
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	return slices.Collect(maps.Keys(v.idx.assigned))
}

// reportsOf returns the agents' latest report of each of the assignments'
// instances that has one, by instance ID.
func (v *view) reportsOf(as []api.Assignment) map[string]api.InstanceStatus {
	out := make(map[string]api.InstanceStatus, len(as))
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	for _, a := range as {
		if r, ok := v.idx.reports[a.InstanceID]; ok {
			out[a.InstanceID] = r.status
		}
	}
	return out
}

// slotUsed reports whether an assignment holds user-namespace slot s.
func (v *view) slotUsed(s int) bool {
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	return v.idx.slots[s] > 0
}

// buildsOf returns the build records of workload key for commit, by any
// node.
func (v *view) buildsOf(key, commit string) []api.Build {
	v.idx.mu.RLock()
	keys := slices.Sorted(maps.Keys(v.idx.builds[key]))
	v.idx.mu.RUnlock()
	var out []api.Build
	for _, k := range keys {
		if r, ok := v.builds.Get(k); ok && api.ShortCommit(r.Commit) == api.ShortCommit(commit) {
			out = append(out, r)
		}
	}
	return out
}

// pathError returns Git source's error for directory path.
func (v *view) pathError(source, path string) (api.PathError, bool) {
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	pe, ok := v.idx.pathErrs[source+"\x00"+path]
	return pe, ok
}
