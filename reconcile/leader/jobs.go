package leader

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// A Job runs in runs: a Job without a schedule has one run per
// generation, a scheduled Job one per firing. A run is started by writing
// its record; each later pass derives its next step from the record, the
// run's assignments (those labelled with its name: the instances that
// exist) and the agents' reports, and writes the record back guarded by the
// version it read. So a new leader continues a run where the last one left
// it, without duplicating or losing an instance.

// storedRun is a run record with its version, for a guarded write.
type storedRun struct {
	run     api.JobRun
	version int64
}

// storedSchedule is a Job's schedule record with its version; version 0:
// none yet.
type storedSchedule struct {
	sched   api.JobSchedule
	version int64
}

// jobRecords are one Job's records as the leader's view holds them.
type jobRecords struct {
	runs     map[string]storedRun
	schedule storedSchedule
}

// jobInput is what planJob decides one Job's next step from.
type jobInput struct {
	Meta api.WorkloadMeta
	// Spec is job.kat's spec; Schedule its parsed schedule (nil: none).
	Spec     quadlet.JobSpec
	Schedule cron.Schedule
	Records  jobRecords
	// Assigned are the workload's assignments; Reported the agents'
	// reports of them, by instance ID.
	Assigned []api.Assignment
	Reported map[string]api.InstanceStatus
	// NodeDown says why a node cannot run an instance: it departed, or
	// it is not registered or not Ready; "" while it is Ready.
	NodeDown func(node string) string
	// Detachable are the nodes that may run detached when lost
	// (AssignInput.Detachable).
	Detachable map[string]bool
	Now        time.Time
}

// jobPlan is one pass's step of one Job.
type jobPlan struct {
	// Runs are the run records to create, update or delete.
	Runs []resources.JobRunWrite
	// Schedule is the schedule record to write; nil: none.
	Schedule *resources.JobScheduleWrite
	// Create is, by run, how many new instances to place; the caller
	// labels them with the run and adds them to its record in Runs.
	Create map[string]int
	// Delete are assignments to remove: instances stopped, given up, or of
	// runs past the history limits.
	Delete []api.Assignment
	// MustBeAbsent are etcd keys the plan takes for absent because the
	// view lacks them: the run record of an assignment labelled with a run
	// the view does not hold (an orphan, deleted in Delete), and the
	// assignment of an instance the plan judges gone. The view's copies of
	// assignments and runs are two watches: at a term's start one can be
	// behind the other. The caller confirms them in etcd before it writes
	// the plan, and otherwise drops this pass of the Job.
	MustBeAbsent []string
	// Active counts the instances that run or wait to, for the scheduler.
	Active []api.Assignment
	// Next is the next firing of a scheduled Job; zero without a schedule.
	Next time.Time
	// Wake is when the plan next changes by the clock alone: the next
	// firing or the deadline of an unfinished run; zero: never.
	Wake time.Time
}

// planJob decides one pass of a Job: every unfinished run steps (instances
// judged from the reports, the run finished by its completions, its
// backoffLimit or its deadline, new instances wanted up to parallelism), a
// new run starts (a new generation of a Job without a schedule, or a due
// firing), and finished runs beyond the history limits go with their
// containers. It is pure.
func planJob(in jobInput) jobPlan {
	plan := jobPlan{Create: map[string]int{}}
	byRun := map[string][]api.Assignment{}
	for _, a := range in.Assigned {
		if _, ok := in.Records.runs[a.Run]; ok {
			byRun[a.Run] = append(byRun[a.Run], a)
		} else if a.Run == "" {
			plan.Delete = append(plan.Delete, a) // from before runs: no run counts it
		} else {
			plan.Delete = append(plan.Delete, a)
			plan.MustBeAbsent = append(plan.MustBeAbsent, resources.JobRunKey(a.Namespace, a.Workload, a.Run))
		}
	}
	runs := make([]storedRun, 0, len(in.Records.runs))
	for _, sr := range in.Records.runs {
		runs = append(runs, sr)
	}
	slices.SortFunc(runs, func(a, b storedRun) int {
		return cmp.Or(a.run.StartTime.Compare(b.run.StartTime), cmp.Compare(a.run.Run, b.run.Run))
	})
	// Step the unfinished runs.
	changed := map[string]bool{}
	for i := range runs {
		sr := &runs[i]
		if sr.run.Finished() {
			continue
		}
		next, create, del, gone := stepRun(sr.run, byRun[sr.run.Run], in.Reported, in.NodeDown, in.Detachable, in.Now)
		if !runEqual(next, sr.run) || create > 0 {
			sr.run, changed[sr.run.Run] = next, true
		}
		if create > 0 {
			plan.Create[next.Run] = create
		}
		plan.MustBeAbsent = append(plan.MustBeAbsent, gone...)
		plan.Delete = append(plan.Delete, del...)
	}
	// Start a new run.
	var start *api.JobRun
	if in.Schedule == nil {
		name := "g" + strconv.FormatInt(in.Meta.Generation, 10)
		if _, ok := in.Records.runs[name]; !ok {
			r := newRun(in, name, time.Time{})
			start = &r
			// The new generation supersedes every run still going.
			for i := range runs {
				if !runs[i].run.Finished() {
					runs[i].run, plan.Delete = finishRun(runs[i].run, byRun[runs[i].run.Run], api.RunFailed,
						api.RunReasonSuperseded, fmt.Sprintf("generation %d started a new run", in.Meta.Generation), in.Now, plan.Delete)
					changed[runs[i].run.Run] = true
					delete(plan.Create, runs[i].run.Run)
				}
			}
		}
	} else {
		fire, last, due := nextFiring(in.Schedule, in.Records.schedule, in.Now)
		sched := in.Records.schedule.sched
		if due || in.Records.schedule.version == 0 {
			sched.LastScheduleTime = last
		}
		if due {
			name := fire.UTC().Format("20060102T1504Z")
			if fire.Second() != 0 {
				name = fire.UTC().Format("20060102T150405Z")
			}
			var active []int
			for i := range runs {
				if !runs[i].run.Finished() {
					active = append(active, i)
				}
			}
			_, exists := in.Records.runs[name]
			switch {
			case exists:
				// Started by a pass whose schedule write was lost: the run
				// stands, the schedule record catches up.
			case len(active) > 0 && in.Spec.Concurrency() == quadlet.ConcurrencyForbid:
				sched.Skipped++
			default:
				if in.Spec.Concurrency() == quadlet.ConcurrencyReplace {
					for _, i := range active {
						runs[i].run, plan.Delete = finishRun(runs[i].run, byRun[runs[i].run.Run], api.RunFailed,
							api.RunReasonReplaced, "the firing at "+fire.UTC().Format(time.RFC3339)+" replaced it", in.Now, plan.Delete)
						changed[runs[i].run.Run] = true
						delete(plan.Create, runs[i].run.Run)
					}
				}
				r := newRun(in, name, fire)
				start = &r
			}
		}
		if due || in.Records.schedule.version == 0 {
			plan.Schedule = &resources.JobScheduleWrite{Namespace: in.Meta.Namespace, Name: in.Meta.Name,
				Schedule: sched, Version: in.Records.schedule.version}
		}
		plan.Next = in.Schedule.Next(sched.LastScheduleTime)
	}
	// History: the newest finished runs within the limits stay with their
	// containers; older ones go. The run of the current generation of a
	// Job without a schedule keeps its record, so it does not run again.
	current := ""
	if in.Schedule == nil {
		current = "g" + strconv.FormatInt(in.Meta.Generation, 10)
	}
	var keep []storedRun
	succeeded, failed := 0, 0
	for _, sr := range slices.Backward(runs) {
		if !sr.run.Finished() {
			keep = append(keep, sr)
			continue
		}
		n, limit := &succeeded, in.Spec.SuccessfulHistory()
		if sr.run.State == api.RunFailed {
			n, limit = &failed, in.Spec.FailedHistory()
		}
		if *n < limit {
			*n++
			keep = append(keep, sr)
			continue
		}
		plan.Delete = append(plan.Delete, byRun[sr.run.Run]...)
		if sr.run.Run == current {
			continue // its containers go, its record stays
		}
		plan.Runs = append(plan.Runs, resources.JobRunWrite{Run: sr.run, Version: sr.version, Delete: true})
		delete(changed, sr.run.Run)
	}
	for _, sr := range slices.Backward(keep) {
		if changed[sr.run.Run] {
			plan.Runs = append(plan.Runs, resources.JobRunWrite{Run: sr.run, Version: sr.version})
		}
		if !sr.run.Finished() {
			for _, a := range byRun[sr.run.Run] {
				if i := instanceIndex(sr.run, a.InstanceID); i >= 0 && !sr.run.Instances[i].Done() {
					plan.Active = append(plan.Active, a)
				}
			}
		}
	}
	if start != nil {
		plan.Runs = append(plan.Runs, resources.JobRunWrite{Run: *start})
		keep = append(keep, storedRun{run: *start})
	}
	plan.Wake = plan.Next
	for _, sr := range keep {
		if !sr.run.Finished() && sr.run.ActiveDeadlineSeconds > 0 {
			if d := runDeadline(sr.run); plan.Wake.IsZero() || d.Before(plan.Wake) {
				plan.Wake = d
			}
		}
	}
	key := func(a api.Assignment) string { return resources.AssignmentKey(a.Node, a.InstanceID) }
	slices.SortFunc(plan.Delete, func(a, b api.Assignment) int { return cmp.Compare(key(a), key(b)) })
	plan.Delete = slices.CompactFunc(plan.Delete, func(a, b api.Assignment) bool { return key(a) == key(b) })
	return plan
}

// newRun is a run's record at its start.
func newRun(in jobInput, name string, fire time.Time) api.JobRun {
	s := in.Spec
	return api.JobRun{
		Namespace: in.Meta.Namespace, Name: in.Meta.Name, Run: name, Generation: in.Meta.Generation,
		State: api.RunRunning, ScheduledTime: fire, StartTime: in.Now,
		Completions: s.Completions, Parallelism: s.Parallelism, BackoffLimit: s.BackoffLimit,
		ActiveDeadlineSeconds: s.ActiveDeadlineSeconds, Instances: []api.JobRunInstance{},
	}
}

// nextFiring decides a scheduled Job's firing at now from its schedule
// record: due when the first firing after the last one handled has come.
// last is what the record should say afterwards: that firing when it is
// the latest one due, now when later ones were missed too (they are
// skipped: missed firings never stack up into several runs), and now on the
// first look at a schedule (no record yet), which arms it without firing.
// It is pure.
func nextFiring(s cron.Schedule, rec storedSchedule, now time.Time) (fire, last time.Time, due bool) {
	if rec.version == 0 || rec.sched.LastScheduleTime.IsZero() {
		return time.Time{}, now, false
	}
	fire = s.Next(rec.sched.LastScheduleTime)
	if fire.IsZero() || fire.After(now) {
		return time.Time{}, rec.sched.LastScheduleTime, false
	}
	if after := s.Next(fire); after.IsZero() || after.After(now) {
		return fire, fire, true
	}
	return fire, now, true
}

// stepRun derives a run's next record from its instances (as, the
// assignments labelled with it) and their reports: instances are judged
// (an instance on a node that departed or is not Ready is given up and
// counts as failed, its message saying which; nodeDown says why a node
// cannot run it, "" while it can; unless the node, not departed, may run
// detached: then the instance stays as it was, waited for, since the node
// keeps running it and reports its end once back; the run's deadline and
// the node's removal still end it), the run finishes when Completions
// instances succeeded, when
// more than BackoffLimit failed, or at its deadline (its active instances
// stopped); otherwise it wants new instances up to Parallelism and the
// completions still missing. It returns the record, how many instances to
// create, the assignments to delete, and the keys of the assignments it
// found gone. It is pure.
func stepRun(run api.JobRun, as []api.Assignment, reported map[string]api.InstanceStatus,
	nodeDown func(string) string, detachable map[string]bool, now time.Time) (_ api.JobRun, create int, del []api.Assignment, gone []string) {
	run.Instances = slices.Clone(run.Instances)
	byID := map[string]api.Assignment{}
	for _, a := range as {
		byID[a.InstanceID] = a
		if instanceIndex(run, a.InstanceID) < 0 {
			run.Instances = append(run.Instances, api.JobRunInstance{InstanceID: a.InstanceID, Node: a.Node,
				State: api.RunInstancePending, CreatedAt: a.CreatedAt})
		}
	}
	for i := range run.Instances {
		in := &run.Instances[i]
		if in.Done() {
			continue
		}
		a, ok := byID[in.InstanceID]
		r, reportedOK := reported[in.InstanceID]
		switch {
		case !ok:
			in.State, in.Message, in.FinishedAt = api.RunInstanceFailed, "its assignment is gone", now
			gone = append(gone, resources.AssignmentKey(in.Node, in.InstanceID))
		case reportedOK && r.Phase == api.InstanceSucceeded:
			in.State, in.ExitCode, in.Message, in.FinishedAt = api.RunInstanceSucceeded, r.ExitCode, "", now
		case reportedOK && r.Phase == api.InstanceFailed:
			in.State, in.ExitCode, in.Message, in.FinishedAt = api.RunInstanceFailed, r.ExitCode, r.Message, now
		case nodeDown(a.Node) != "" && nodeDown(a.Node) != nodeDeparted && detachable[a.Node]:
			in.Message = fmt.Sprintf("node %s %s; it may run detached: waiting for it to report", a.Node, nodeDown(a.Node))
		case nodeDown(a.Node) != "":
			in.State, in.Message, in.FinishedAt = api.RunInstanceFailed, fmt.Sprintf("node %s %s: instance given up", a.Node, nodeDown(a.Node)), now
			del = append(del, a)
		case reportedOK && r.Phase == api.InstanceRunning:
			in.State, in.Message = api.RunInstanceRunning, ""
		default:
			in.State, in.Message = api.RunInstancePending, ""
		}
	}
	countRun(&run)
	switch {
	case run.Succeeded >= run.Completions:
		run, del = finishRun(run, as, api.RunSucceeded, api.RunReasonCompleted,
			fmt.Sprintf("%d of %d completions", run.Succeeded, run.Completions), now, del)
		return run, 0, del, gone
	case run.Failed > run.BackoffLimit:
		run, del = finishRun(run, as, api.RunFailed, api.RunReasonBackoffLimitExceeded,
			fmt.Sprintf("%d instances failed, backoffLimit %d", run.Failed, run.BackoffLimit), now, del)
		return run, 0, del, gone
	case run.ActiveDeadlineSeconds > 0 && !now.Before(runDeadline(run)):
		run, del = finishRun(run, as, api.RunFailed, api.RunReasonDeadlineExceeded,
			fmt.Sprintf("still running %ds after its start (activeDeadlineSeconds)", run.ActiveDeadlineSeconds), now, del)
		return run, 0, del, gone
	}
	create = max(0, min(run.Parallelism-run.Active, run.Completions-run.Succeeded-run.Active))
	return run, create, del, gone
}

// runDeadline is when a run with ActiveDeadlineSeconds fails.
func runDeadline(run api.JobRun) time.Time {
	return run.StartTime.Add(time.Duration(run.ActiveDeadlineSeconds) * time.Second)
}

// finishRun ends a run: its unfinished instances are stopped (their
// assignments, among as, added to del) and its counts and times set.
func finishRun(run api.JobRun, as []api.Assignment, state, reason, msg string, now time.Time,
	del []api.Assignment) (api.JobRun, []api.Assignment) {
	run.Instances = slices.Clone(run.Instances)
	stopped := map[string]bool{}
	for i := range run.Instances {
		if in := &run.Instances[i]; !in.Done() {
			in.State, in.Message, in.FinishedAt = api.RunInstanceStopped, "stopped: run "+reason, now
			stopped[in.InstanceID] = true
		}
	}
	for _, a := range as {
		if stopped[a.InstanceID] {
			del = append(del, a)
		}
	}
	run.State, run.Reason, run.Message = state, reason, msg
	t := now
	run.CompletionTime = &t
	countRun(&run)
	return run, del
}

// countRun sets a run's counts from its instances.
func countRun(run *api.JobRun) {
	run.Succeeded, run.Failed, run.Active = 0, 0, 0
	for _, in := range run.Instances {
		switch in.State {
		case api.RunInstanceSucceeded:
			run.Succeeded++
		case api.RunInstanceFailed:
			run.Failed++
		case api.RunInstancePending, api.RunInstanceRunning:
			run.Active++
		}
	}
}

func instanceIndex(run api.JobRun, id string) int {
	return slices.IndexFunc(run.Instances, func(in api.JobRunInstance) bool { return in.InstanceID == id })
}

// runEqual compares two run records.
func runEqual(a, b api.JobRun) bool {
	if a.State != b.State || a.Reason != b.Reason || a.Message != b.Message || a.Succeeded != b.Succeeded ||
		a.Failed != b.Failed || a.Active != b.Active || (a.CompletionTime == nil) != (b.CompletionTime == nil) {
		return false
	}
	return slices.Equal(a.Instances, b.Instances)
}
