package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// writeJobs writes the Jobs' records of a plan, one transaction per Job,
// and waits until the view holds them. A write refused because a record
// moved on is an error: the pass is retried from the view.
func (l *Leader) writeJobs(ctx context.Context, jobs []JobWrite) error {
	var rev int64
	for _, j := range jobs {
		if len(j.Runs) == 0 && j.Schedule == nil {
			continue
		}
		var sched []resources.JobScheduleWrite
		if j.Schedule != nil {
			sched = append(sched, *j.Schedule)
		}
		ok, r, err := l.cfg.Repo.WriteJobRuns(ctx, j.Runs, sched, map[string]int64{j.Namespace + "/" + j.Name: j.MetaVersion})
		if err != nil {
			return fmt.Errorf("job %s/%s: %w", j.Namespace, j.Name, err)
		}
		if !ok {
			return fmt.Errorf("job %s/%s: records moved on since the pass read them", j.Namespace, j.Name)
		}
		rev = max(rev, r)
		for _, rw := range j.Runs {
			if rw.Version == 0 || rw.Delete {
				l.cfg.Logger.Info().Str("component", "jobs").Str("workload", j.Namespace+"/"+j.Name).Str("run", rw.Run.Run).
					Bool("deleted", rw.Delete).Msg(map[bool]string{true: "run deleted", false: "run started"}[rw.Delete])
			} else if rw.Run.Finished() {
				l.cfg.Logger.Info().Str("component", "jobs").Str("workload", j.Namespace+"/"+j.Name).Str("run", rw.Run.Run).
					Str("state", rw.Run.State).Str("reason", rw.Run.Reason).Msg("run finished")
			}
		}
	}
	if rev == 0 {
		return nil
	}
	return l.view.jobs.WaitRevision(ctx, rev)
}

// confirmAbsent drops from plan the part of each Job whose MustBeAbsent keys
// are not all absent from etcd: the view was behind, and the change that
// brings it up to date wakes the pass again.
func (l *Leader) confirmAbsent(ctx context.Context, plan *AssignmentPlan) error {
	for _, j := range slices.Clone(plan.Jobs) {
		for _, key := range j.MustBeAbsent {
			_, err := l.cfg.Repo.Store().Get(ctx, key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("job %s/%s: read %s: %w", j.Namespace, j.Name, key, err)
			}
			plan.dropWorkload(j.Namespace, j.Name)
			break
		}
	}
	return nil
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
