package leader

import (
	"encoding/json"
	"maps"
	"slices"
	"sync"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// jobEntry is one record under /kat/jobs/: a run or a schedule, with its
// version.
type jobEntry struct {
	run     *api.JobRun
	sched   *api.JobSchedule
	version int64
}

func decodeJobEntry(kv store.KV) (jobEntry, bool) {
	_, _, isSched, ok := resources.ParseJobKey(kv.Key)
	if !ok {
		return jobEntry{}, false
	}
	e := jobEntry{version: kv.Version}
	if isSched {
		e.sched = &api.JobSchedule{}
		return e, json.Unmarshal(kv.Value, e.sched) == nil
	}
	e.run = &api.JobRun{}
	return e, json.Unmarshal(kv.Value, e.run) == nil
}

// jobIndex is, by workload, the keys of its job records.
type jobIndex struct {
	mu   sync.RWMutex
	keys map[string]map[string]struct{}
}

// jobChanged is the job records cache's hook.
func (v *view) jobChanged(key string, _, new *jobEntry) {
	k, _, _, ok := resources.ParseJobKey(key)
	if !ok {
		return
	}
	v.jobIdx.mu.Lock()
	if new != nil {
		addKey(v.jobIdx.keys, k, key)
	} else {
		removeKey(v.jobIdx.keys, k, key)
	}
	v.jobIdx.mu.Unlock()
	v.markDirty(factJobs, k)
}

// jobsOf returns workload key's job records.
func (v *view) jobsOf(key string) jobRecords {
	v.jobIdx.mu.RLock()
	keys := slices.Sorted(maps.Keys(v.jobIdx.keys[key]))
	v.jobIdx.mu.RUnlock()
	rec := jobRecords{runs: map[string]storedRun{}}
	for _, k := range keys {
		e, ok := v.jobs.Get(k)
		switch {
		case !ok:
		case e.run != nil:
			rec.runs[e.run.Run] = storedRun{run: *e.run, version: e.version}
		case e.sched != nil:
			rec.schedule = storedSchedule{sched: *e.sched, version: e.version}
		}
	}
	return rec
}

// jobKeys returns the workloads that have job records.
func (v *view) jobKeys() []string {
	v.jobIdx.mu.RLock()
	defer v.jobIdx.mu.RUnlock()
	return slices.Collect(maps.Keys(v.jobIdx.keys))
}

// releaseFinishedJobs gives back to nodes what the finished instances of
// Jobs request: their assignments stay while their run is in the history
// (the exited containers are kept for their logs), but they run nothing,
// so the scheduler must not count them against the nodes' allocatable.
func (v *view) releaseFinishedJobs(nodes []sched.Node) {
	byName := make(map[string]int, len(nodes))
	for i, n := range nodes {
		byName[n.Name] = i
	}
	type gpuKey struct {
		node string
		gpu  int
	}
	gpus := map[gpuKey]int{}
	for _, k := range v.jobKeys() {
		as := v.assignmentsOf(k)
		reports := v.reportsOf(as)
		for _, a := range as {
			r, ok := reports[a.InstanceID]
			i, known := byName[a.Node]
			if !ok || !known || (r.Phase != api.InstanceSucceeded && r.Phase != api.InstanceFailed) {
				continue
			}
			n := &nodes[i]
			n.Used.CPU, n.Used.Memory = max(0, n.Used.CPU-a.CPUMillis), max(0, n.Used.Memory-a.MemoryBytes)
			if a.GPU != nil {
				gpus[gpuKey{a.Node, *a.GPU}]++
			}
		}
	}
	if len(gpus) == 0 {
		return
	}
	v.idx.mu.RLock()
	defer v.idx.mu.RUnlock()
	for g, finished := range gpus {
		u := v.idx.usage[g.node]
		if u == nil || u.gpus[g.gpu] > finished {
			continue // another instance holds it too
		}
		n := &nodes[byName[g.node]]
		for j := range n.GPUs {
			if n.GPUs[j].Index == g.gpu {
				n.GPUs[j].InUse = false
			}
		}
	}
}
