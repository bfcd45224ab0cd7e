package leader

import (
	"maps"
	"slices"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// JobWrite is what one pass writes of one Job's records, after the
// assignments of the same plan.
type JobWrite struct {
	// Namespace and Name are the Job's; MetaVersion its meta's version the
	// run records are guarded by.
	Namespace, Name string
	MetaVersion     int64
	Runs            []resources.JobRunWrite
	Schedule        *resources.JobScheduleWrite
	// MustBeAbsent are keys the plan took for absent (jobPlan): the Job's
	// part of the plan holds only if etcd has none of them.
	MustBeAbsent []string
}

// job plans a Job (jobs.go): the steps of its runs, and where their new
// instances run. It is the placement pass's entry point for Jobs.
func (p *planner) job(w workload, commit string, cur []api.Assignment) {
	jp := planJob(jobInput{
		Meta: w.Meta, Spec: *w.Spec.Job, Schedule: w.Spec.Schedule, Records: p.in.Jobs[w.Key()],
		Assigned: cur, Reported: p.in.Reported, Now: p.in.Now,
		NodeDown: p.nodeDown, Detachable: p.in.Detachable,
	})
	p.count(w.Key(), jp.Active)
	p.plan.Delete = append(p.plan.Delete, jp.Delete...)
	st := Scheduling{Desired: len(jp.Active)}
	for _, run := range slices.Sorted(maps.Keys(jp.Create)) {
		n := jp.Create[run]
		before := len(p.plan.Put)
		res := p.place(w, commit, n, nil)
		st.Desired += n
		if res.Unplaced > 0 {
			st.Unplaced, st.Reason, st.Cause = st.Unplaced+res.Unplaced, res.Reason, res.Cause
		}
		i := slices.IndexFunc(jp.Runs, func(rw resources.JobRunWrite) bool { return rw.Run.Run == run && !rw.Delete })
		for j := before; j < len(p.plan.Put); j++ {
			a := &p.plan.Put[j]
			a.Run = run
			if i >= 0 {
				r := &jp.Runs[i].Run
				r.Instances = append(r.Instances, api.JobRunInstance{InstanceID: a.InstanceID, Node: a.Node,
					State: api.RunInstancePending, CreatedAt: a.CreatedAt})
				countRun(r)
			}
		}
	}
	p.plan.Scheduling[w.Key()] = st
	if !jp.Wake.IsZero() {
		p.wakeAt(w.Key(), jp.Wake)
	}
	if len(jp.Runs) > 0 || jp.Schedule != nil || len(jp.MustBeAbsent) > 0 {
		p.plan.Jobs = append(p.plan.Jobs, JobWrite{Namespace: w.Meta.Namespace, Name: w.Meta.Name, MetaVersion: w.MetaVersion,
			Runs: jp.Runs, Schedule: jp.Schedule, MustBeAbsent: jp.MustBeAbsent})
	}
}

// nodeDeparted is nodeDown's answer for a node whose agent departed.
const nodeDeparted = "departed"

// nodeDown says why node cannot run an instance: it departed (its agent
// left for good), or it is not registered or not Ready; "" while it is
// Ready.
func (p *planner) nodeDown(node string) string {
	i, ok := p.byName[node]
	switch {
	case p.in.Departed[node]:
		return nodeDeparted
	case !ok:
		return "is not registered"
	case !p.nodes[i].Ready:
		return "is not ready"
	}
	return ""
}

// dropWorkload removes workload ns/name's part of the plan: its puts,
// deletes and job writes.
func (p *AssignmentPlan) dropWorkload(ns, name string) {
	other := func(a api.Assignment) bool { return a.Namespace != ns || a.Workload != name }
	p.Put = slices.DeleteFunc(p.Put, func(a api.Assignment) bool { return !other(a) })
	p.Delete = slices.DeleteFunc(p.Delete, func(a api.Assignment) bool { return !other(a) })
	p.Jobs = slices.DeleteFunc(p.Jobs, func(j JobWrite) bool { return j.Namespace == ns && j.Name == name })
}
