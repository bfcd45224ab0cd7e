package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Job runs (docs/architecture.md "etcd keys"): the leader's record of each run
// of a Job and of each scheduled Job's last firing, written by the leader
// only:
//
//	/kat/jobs/{ns}/{name}/runs/{run}   JobRun
//	/kat/jobs/{ns}/{name}/schedule     JobSchedule
const prefixJobs = "/kat/jobs/"

// JobsPrefix is the prefix of every Job's run records.
func JobsPrefix() string { return prefixJobs }

// JobPrefix is the prefix of one Job's records.
func JobPrefix(ns, name string) string { return prefixJobs + ns + "/" + name + "/" }

// JobRunKey is where one run of a Job lives.
func JobRunKey(ns, name, run string) string { return JobPrefix(ns, name) + "runs/" + run }

// JobScheduleKey is where a scheduled Job's last firing lives.
func JobScheduleKey(ns, name string) string { return JobPrefix(ns, name) + "schedule" }

// ParseJobKey splits a key under JobsPrefix into the workload ("ns/name")
// and, for a run record, the run's name; isSchedule is true for the
// schedule record. ok is false for any other key.
func ParseJobKey(key string) (workload, run string, isSchedule, ok bool) {
	rest, found := strings.CutPrefix(key, prefixJobs)
	if !found {
		return "", "", false, false
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 3 && parts[2] == "schedule":
		return parts[0] + "/" + parts[1], "", true, true
	case len(parts) == 4 && parts[2] == "runs" && parts[3] != "":
		return parts[0] + "/" + parts[1], parts[3], false, true
	}
	return "", "", false, false
}

// JobRunWrite is one change of a run record: Put at Version (0: the run
// must not exist yet), or Delete.
type JobRunWrite struct {
	Run     api.JobRun
	Version int64
	Delete  bool
}

// JobScheduleWrite puts a Job's schedule record when it is still at Version
// (0: it must not exist yet).
type JobScheduleWrite struct {
	Namespace, Name string
	Schedule        api.JobSchedule
	Version         int64
}

// WriteJobRuns writes the run and schedule records of one pass of the
// leader's job logic in one transaction, every record guarded by the
// version the leader decided from, and each run it creates or changes by
// its workload's meta version (metaVersion, by "ns/name"; absent: not
// checked), so a run never outlives its workload's deletion. It reports
// whether it wrote (false: another writer got there first, decide again)
// and the store revision after the attempt.
func (r *Repo) WriteJobRuns(ctx context.Context, runs []JobRunWrite, sched []JobScheduleWrite, metaVersion map[string]int64) (bool, int64, error) {
	var cmps []store.Compare
	var ops []store.Op
	guarded := map[string]bool{}
	guard := func(ns, name string) {
		k := ns + "/" + name
		if v, ok := metaVersion[k]; ok && !guarded[k] {
			guarded[k] = true
			cmps = append(cmps, store.Compare{Key: MetaKey(ns, name), ExpectedVersion: v})
		}
	}
	for _, w := range runs {
		key := JobRunKey(w.Run.Namespace, w.Run.Name, w.Run.Run)
		cmps = append(cmps, store.Compare{Key: key, ExpectedVersion: w.Version})
		if w.Delete {
			ops = append(ops, store.Op{Type: store.OpDelete, Key: key})
			continue
		}
		guard(w.Run.Namespace, w.Run.Name)
		op, err := putJSON(key, w.Run)
		if err != nil {
			return false, 0, err
		}
		ops = append(ops, op)
	}
	for _, w := range sched {
		key := JobScheduleKey(w.Namespace, w.Name)
		guard(w.Namespace, w.Name)
		cmps = append(cmps, store.Compare{Key: key, ExpectedVersion: w.Version})
		op, err := putJSON(key, w.Schedule)
		if err != nil {
			return false, 0, err
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		return true, 0, nil
	}
	if len(ops)+len(cmps) > maxOpsPerTxn {
		return false, 0, fmt.Errorf("write job runs: %d changes are more than one transaction holds", len(ops))
	}
	res, err := r.st.Txn(ctx, cmps, ops, nil)
	if err != nil {
		return false, 0, fmt.Errorf("write job runs: %w", err)
	}
	return res.Committed, res.Revision, nil
}

// ListJobRuns returns the run records of every Job, of namespace ns when it
// is not empty, sorted by namespace, name and start time.
func (r *Repo) ListJobRuns(ctx context.Context, ns string) ([]api.JobRun, error) {
	prefix := prefixJobs
	if ns != "" {
		prefix += ns + "/"
	}
	kvs, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("list job runs: %w", err)
	}
	out := []api.JobRun{}
	for _, kv := range kvs {
		if _, _, isSched, ok := ParseJobKey(kv.Key); !ok || isSched {
			continue
		}
		var run api.JobRun
		if err := json.Unmarshal(kv.Value, &run); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, run)
	}
	SortJobRuns(out)
	return out, nil
}

// SortJobRuns sorts runs by namespace, name, start time and run name.
func SortJobRuns(runs []api.JobRun) {
	sort.SliceStable(runs, func(i, j int) bool {
		a, b := runs[i], runs[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if !a.StartTime.Equal(b.StartTime) {
			return a.StartTime.Before(b.StartTime)
		}
		return a.Run < b.Run
	})
}
