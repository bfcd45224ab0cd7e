package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// jobWorkload is a Job of namespace ns1 with the given job.kat spec lines.
func jobWorkload(t testing.TB, name string, gen int64, spec string) workload {
	t.Helper()
	files := map[string][]byte{
		"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: ns1}
spec:
  type: Job
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Never}
  container: {command: ["true"]}
`, name),
		"job.kat": []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec:\n" + spec),
	}
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: name, Type: quadlet.TypeJob, Generation: gen}, files)
}

// jobWorld runs the placement pass of one Job against an in-memory copy of
// what the leader writes: the records (with versions, every write checked
// against them like the transaction's guards), the assignments, and the
// agents' reports, which the test sets.
type jobWorld struct {
	t       *testing.T
	w       workload
	nodes   []sched.Node
	rec     jobRecords
	as      []api.Assignment
	reports map[string]api.InstanceStatus
	// departed are the nodes whose agent departed for good.
	departed map[string]bool
	now      time.Time
	suffix   int
	// created are the instance IDs ever placed; maxActive the most
	// instances at once that had not finished.
	created   []string
	maxActive int
	// written counts the record versions handed out.
	written int64
	// detachable are the nodes that may run detached.
	detachable map[string]bool
}

func newJobWorld(t *testing.T, w workload) *jobWorld {
	t.Helper()
	return &jobWorld{t: t, w: w, nodes: []sched.Node{{Name: "n1", Ready: true}, {Name: "n2", Ready: true}},
		rec: jobRecords{runs: map[string]storedRun{}}, reports: map[string]api.InstanceStatus{},
		now: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)}
}

// pass plans once and applies the plan.
func (jw *jobWorld) pass() AssignmentPlan {
	jw.t.Helper()
	plan := PlanAssignments(AssignInput{
		Nodes: jw.nodes, Desired: []workload{jw.w}, Current: slices.Clone(jw.as), Reported: jw.reports, Now: jw.now,
		NewSuffix: func() string { jw.suffix++; return fmt.Sprintf("s%d", jw.suffix) },
		Jobs:      map[string]jobRecords{jw.w.Key(): jw.copyRecords()}, Departed: jw.departed,
		Detachable: jw.detachable,
	})
	for _, a := range plan.Delete {
		jw.as = slices.DeleteFunc(jw.as, func(b api.Assignment) bool { return b.Node == a.Node && b.InstanceID == a.InstanceID })
	}
	for _, a := range plan.Put {
		if a.Run == "" {
			jw.t.Fatalf("instance %s placed without a run", a.InstanceID)
		}
		jw.as = append(jw.as, a)
		jw.created = append(jw.created, a.InstanceID)
	}
	for _, j := range plan.Jobs {
		for _, rw := range j.Runs {
			cur := jw.rec.runs[rw.Run.Run]
			if cur.version != rw.Version {
				jw.t.Fatalf("run %s written at version %d, stored %d", rw.Run.Run, rw.Version, cur.version)
			}
			if rw.Delete {
				delete(jw.rec.runs, rw.Run.Run)
				continue
			}
			jw.written++
			jw.rec.runs[rw.Run.Run] = storedRun{run: rw.Run, version: jw.written}
		}
		if s := j.Schedule; s != nil {
			if s.Version != jw.rec.schedule.version {
				jw.t.Fatalf("schedule written at version %d, stored %d", s.Version, jw.rec.schedule.version)
			}
			jw.written++
			jw.rec.schedule = storedSchedule{sched: s.Schedule, version: jw.written}
		}
	}
	jw.maxActive = max(jw.maxActive, len(jw.unfinished()))
	return plan
}

func (jw *jobWorld) copyRecords() jobRecords {
	c := jobRecords{runs: map[string]storedRun{}, schedule: jw.rec.schedule}
	for k, v := range jw.rec.runs {
		c.runs[k] = v
	}
	return c
}

// unfinished returns the assignments whose instance has not reported an
// end.
func (jw *jobWorld) unfinished() []api.Assignment {
	var out []api.Assignment
	for _, a := range jw.as {
		if r, ok := jw.reports[a.InstanceID]; !ok || (r.Phase != api.InstanceSucceeded && r.Phase != api.InstanceFailed) {
			out = append(out, a)
		}
	}
	return out
}

// finish reports every unfinished instance as exited with code.
func (jw *jobWorld) finish(code int) {
	for _, a := range jw.unfinished() {
		phase := api.InstanceSucceeded
		if code != 0 {
			phase = api.InstanceFailed
		}
		jw.reports[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: phase, ExitCode: code}
	}
}

// runUntilFinished passes, finishing every instance with code after each
// pass, until run name finishes.
func (jw *jobWorld) runUntilFinished(name string, code int) api.JobRun {
	jw.t.Helper()
	for range 50 {
		jw.pass()
		if r, ok := jw.rec.runs[name]; ok && r.run.Finished() {
			return r.run
		}
		jw.finish(code)
		jw.now = jw.now.Add(time.Second)
	}
	jw.t.Fatalf("run %s did not finish: %+v", name, jw.rec.runs[name].run)
	return api.JobRun{}
}

func TestJobRunCompletionsAndParallelism(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                     string
		completions, parallelism int
		wantMaxActive            int
	}{
		{"one", 1, 1, 1},
		{"five by two", 5, 2, 2},
		{"three by five", 3, 5, 3},
		{"four by one", 4, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			jw := newJobWorld(t, jobWorkload(t, "batch", 1, fmt.Sprintf("  completions: %d\n  parallelism: %d\n", tc.completions, tc.parallelism)))
			first := jw.pass()
			if len(first.Put) != 0 || len(first.Jobs) != 1 || len(first.Jobs[0].Runs) != 1 || first.Jobs[0].Runs[0].Version != 0 {
				t.Fatalf("first pass: want the run's record created alone, got puts %d jobs %+v", len(first.Put), first.Jobs)
			}
			run := jw.runUntilFinished("g1", 0)
			if run.State != api.RunSucceeded || run.Reason != api.RunReasonCompleted || run.Succeeded != tc.completions ||
				run.Failed != 0 || run.Active != 0 || run.CompletionTime == nil {
				t.Fatalf("run = %+v", run)
			}
			if len(jw.created) != tc.completions || len(run.Instances) != tc.completions {
				t.Errorf("created %d instances, record lists %d; want %d", len(jw.created), len(run.Instances), tc.completions)
			}
			if jw.maxActive != tc.wantMaxActive {
				t.Errorf("at most %d instances ran at once, want %d", jw.maxActive, tc.wantMaxActive)
			}
			// Done: more passes change nothing.
			if p := jw.pass(); !p.Empty() {
				t.Errorf("a finished run planned %+v", p)
			}
		})
	}
}

func TestJobRunBackoffLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{0, 1, 3} {
		t.Run(fmt.Sprint("backoffLimit ", limit), func(t *testing.T) {
			t.Parallel()
			jw := newJobWorld(t, jobWorkload(t, "flaky", 1, fmt.Sprintf("  backoffLimit: %d\n", limit)))
			run := jw.runUntilFinished("g1", 3)
			if run.State != api.RunFailed || run.Reason != api.RunReasonBackoffLimitExceeded || run.Failed != limit+1 {
				t.Fatalf("run = %+v", run)
			}
			if len(jw.created) != 1+limit {
				t.Errorf("%d attempts, want 1 + backoffLimit = %d", len(jw.created), 1+limit)
			}
			for _, in := range run.Instances {
				if in.State != api.RunInstanceFailed || in.ExitCode != 3 {
					t.Errorf("instance %+v, want Failed with exit code 3", in)
				}
			}
		})
	}
	t.Run("a success after failures completes", func(t *testing.T) {
		t.Parallel()
		jw := newJobWorld(t, jobWorkload(t, "flaky", 1, "  backoffLimit: 2\n"))
		jw.pass()
		jw.pass()
		jw.finish(1)
		jw.pass()
		jw.finish(0)
		jw.pass()
		if run := jw.rec.runs["g1"].run; run.State != api.RunSucceeded || run.Failed != 1 || run.Succeeded != 1 || len(jw.created) != 2 {
			t.Fatalf("run = %+v, created %d", run, len(jw.created))
		}
	})
}

func TestJobRunDeadline(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "slow", 1, "  activeDeadlineSeconds: 30\n  parallelism: 2\n  completions: 2\n"))
	jw.pass()
	jw.pass()
	if len(jw.as) != 2 {
		t.Fatalf("%d instances placed, want 2", len(jw.as))
	}
	for _, a := range jw.as {
		jw.reports[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning}
	}
	jw.now = jw.now.Add(29 * time.Second)
	if p := jw.pass(); len(p.Delete) != 0 || jw.rec.runs["g1"].run.Finished() {
		t.Fatalf("stopped before the deadline: %+v", jw.rec.runs["g1"].run)
	}
	jw.now = jw.now.Add(time.Second)
	p := jw.pass()
	run := jw.rec.runs["g1"].run
	if run.State != api.RunFailed || run.Reason != api.RunReasonDeadlineExceeded || run.Active != 0 {
		t.Fatalf("run = %+v", run)
	}
	if len(p.Delete) != 2 || len(jw.as) != 0 {
		t.Errorf("deadline deleted %d assignments, %d left; want both stopped", len(p.Delete), len(jw.as))
	}
	for _, in := range run.Instances {
		if in.State != api.RunInstanceStopped {
			t.Errorf("instance %+v, want Stopped", in)
		}
	}
}

// TestJobRunNodeLoss: an instance on a node that is lost (or departed) is
// given up and counts as failed: another node runs a new one while the
// backoffLimit allows, else the run fails.
func TestJobRunNodeLoss(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 0} {
		t.Run(fmt.Sprintf("backoffLimit %d", limit), func(t *testing.T) {
			jw := newJobWorld(t, jobWorkload(t, "lost", 1, fmt.Sprintf("  backoffLimit: %d\n", limit)))
			jw.nodes = jw.nodes[:1]
			jw.pass()
			jw.pass()
			lost := jw.as[0]
			// n1 turns NotReady; n2 joins.
			jw.nodes = append(jw.nodes, sched.Node{Name: "n2", Ready: true})
			jw.nodes[0].Ready = false
			p := jw.pass()
			run := jw.rec.runs["g1"].run
			if run.Failed != 1 || run.Instances[0].State != api.RunInstanceFailed || !strings.Contains(run.Instances[0].Message, "not ready") {
				t.Fatalf("run = %+v", run)
			}
			if !slices.ContainsFunc(p.Delete, func(a api.Assignment) bool { return a.InstanceID == lost.InstanceID }) {
				t.Error("the lost instance's assignment was not deleted")
			}
			if limit == 0 {
				if run.State != api.RunFailed || run.Reason != api.RunReasonBackoffLimitExceeded || len(p.Put) != 0 {
					t.Errorf("run %s/%s, replacement %+v; want it failed, backoffLimit exceeded, and none", run.State, run.Reason, p.Put)
				}
				return
			}
			if len(p.Put) != 1 || p.Put[0].Node != "n2" {
				t.Errorf("replacement %+v, want one on n2", p.Put)
			}
		})
	}
}

// TestJobRunNodeDeparted: an instance on a node whose agent departed is
// given up like one on a lost node, and its record says the node departed,
// not that it is not ready.
func TestJobRunNodeDeparted(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "departs", 1, "  backoffLimit: 1\n"))
	jw.nodes = jw.nodes[:1]
	jw.pass()
	jw.pass()
	gone := jw.as[0]
	// n1 departs (NotReady, and departed); n2 joins.
	jw.nodes = append(jw.nodes, sched.Node{Name: "n2", Ready: true})
	jw.nodes[0].Ready = false
	jw.departed = map[string]bool{"n1": true}
	p := jw.pass()
	run := jw.rec.runs["g1"].run
	in := run.Instances[0]
	if run.Failed != 1 || in.State != api.RunInstanceFailed || in.Message != "node n1 departed: instance given up" {
		t.Fatalf("the departed node's instance: %+v; want failed, saying node n1 departed", in)
	}
	if !slices.ContainsFunc(p.Delete, func(a api.Assignment) bool { return a.InstanceID == gone.InstanceID }) {
		t.Error("the departed node's assignment was not deleted")
	}
	if len(p.Put) != 1 || p.Put[0].Node != "n2" {
		t.Errorf("replacement %+v, want one on n2", p.Put)
	}
}

// TestJobRunWaitsForDetachedNode: an instance on a lost node that may run
// detached is waited for, neither given up nor replaced, while its node
// is away; once back, its report finishes the run (here a success), and
// the run's deadline still ends it should the node stay away.
func TestJobRunWaitsForDetachedNode(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "away", 1, "  backoffLimit: 0\n  activeDeadlineSeconds: 600\n"))
	jw.nodes = jw.nodes[:1]
	jw.detachable = map[string]bool{"n1": true}
	jw.pass()
	jw.pass()
	away := jw.as[0]
	jw.reports[away.InstanceID] = api.InstanceStatus{InstanceID: away.InstanceID, Phase: api.InstanceRunning}
	jw.pass()
	jw.nodes = append(jw.nodes, sched.Node{Name: "n2", Ready: true})
	jw.nodes[0].Ready = false
	for range 3 {
		jw.now = jw.now.Add(time.Minute)
		p := jw.pass()
		run := jw.rec.runs["g1"].run
		if run.Finished() || run.Failed != 0 || run.Instances[0].State != api.RunInstanceRunning ||
			!strings.Contains(run.Instances[0].Message, "may run detached") || len(p.Put) != 0 || len(p.Delete) != 0 {
			t.Fatalf("a detachable node away: run %+v, put %+v, delete %+v; want its instance waited for", run, p.Put, p.Delete)
		}
	}
	// Back, it reports the instance's success.
	jw.nodes[0].Ready = true
	jw.finish(0)
	jw.pass()
	if run := jw.rec.runs["g1"].run; run.State != api.RunSucceeded || run.Succeeded != 1 || len(jw.created) != 1 || run.Instances[0].Message != "" {
		t.Fatalf("after the node came back: run %+v, %d created; want it succeeded by the one instance", run, len(jw.created))
	}

	late := newJobWorld(t, jobWorkload(t, "late", 1, "  backoffLimit: 0\n  activeDeadlineSeconds: 60\n"))
	late.nodes, late.detachable = late.nodes[:1], map[string]bool{"n1": true}
	late.pass()
	late.pass()
	late.nodes[0].Ready = false
	late.now = late.now.Add(time.Minute)
	late.pass()
	if run := late.rec.runs["g1"].run; run.State != api.RunFailed || run.Reason != api.RunReasonDeadlineExceeded {
		t.Fatalf("a detachable node away past the run's deadline: %+v, want it failed at its deadline", run)
	}
}

func TestJobNewGenerationSupersedes(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "gen", 1, ""))
	jw.pass()
	jw.pass()
	old := jw.as[0]
	jw.w = jobWorkload(t, "gen", 2, "  completions: 2\n")
	p := jw.pass()
	if r := jw.rec.runs["g1"].run; r.State != api.RunFailed || r.Reason != api.RunReasonSuperseded {
		t.Fatalf("g1 = %+v", r)
	}
	if !slices.ContainsFunc(p.Delete, func(a api.Assignment) bool { return a.InstanceID == old.InstanceID }) {
		t.Error("the superseded run's instance was not stopped")
	}
	if r, ok := jw.rec.runs["g2"]; !ok || r.run.Completions != 2 {
		t.Fatalf("g2 = %+v", r)
	}
	if run := jw.runUntilFinished("g2", 0); run.State != api.RunSucceeded {
		t.Fatalf("g2 = %+v", run)
	}
}

func TestNextFiring(t *testing.T) {
	t.Parallel()
	everyMinute, err := quadlet.ParseSchedule("*/1 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	every90, err := quadlet.ParseSchedule("@every 90m")
	if err != nil {
		t.Fatal(err)
	}
	at := func(hms string) time.Time {
		t.Helper()
		v, err := time.Parse("15:04:05", hms)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2026, 11, 24, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
	}
	rec := func(last string) storedSchedule {
		return storedSchedule{sched: api.JobSchedule{LastScheduleTime: at(last)}, version: 7}
	}
	for _, tc := range []struct {
		name     string
		every90  bool
		rec      storedSchedule
		now      string
		wantDue  bool
		wantFire string
		wantLast string
	}{
		{name: "first look arms the schedule without firing", rec: storedSchedule{}, now: "10:00:30", wantLast: "10:00:30"},
		{name: "not yet", rec: rec("10:00:00"), now: "10:00:59", wantLast: "10:00:00"},
		{name: "on time", rec: rec("10:00:00"), now: "10:01:00", wantDue: true, wantFire: "10:01:00", wantLast: "10:01:00"},
		{name: "a little late, one firing due", rec: rec("10:00:00"), now: "10:01:40", wantDue: true, wantFire: "10:01:00", wantLast: "10:01:00"},
		{name: "leader down half an hour: one run, not thirty", rec: rec("10:00:00"), now: "10:30:20", wantDue: true,
			wantFire: "10:01:00", wantLast: "10:30:20"},
		{name: "@every keeps its own cadence", every90: true, rec: rec("10:00:00"), now: "11:30:05", wantDue: true,
			wantFire: "11:30:00", wantLast: "11:30:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := everyMinute
			if tc.every90 {
				s = every90
			}
			fire, last, due := nextFiring(s, tc.rec, at(tc.now))
			if due != tc.wantDue || !last.Equal(at(tc.wantLast)) || (tc.wantDue && !fire.Equal(at(tc.wantFire))) {
				t.Fatalf("fire %s last %s due %v; want %s %s %v", fire.Format(time.TimeOnly), last.Format(time.TimeOnly), due,
					tc.wantFire, tc.wantLast, tc.wantDue)
			}
			if tc.wantDue {
				// After the firing, the next one is in the future: missed
				// firings never come back.
				if next := s.Next(last); !next.After(at(tc.now)) {
					t.Errorf("next firing %s is not after now", next.Format(time.TimeOnly))
				}
			}
		})
	}
}

func TestScheduledJobFiresOncePerFiringWithoutStacking(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "cron", 1, "  schedule: \"*/1 * * * *\"\n"))
	jw.now = time.Date(2026, 11, 24, 10, 0, 30, 0, time.UTC)
	jw.pass() // arms
	if len(jw.rec.runs) != 0 || jw.rec.schedule.version == 0 {
		t.Fatalf("first look: runs %d, schedule %+v", len(jw.rec.runs), jw.rec.schedule)
	}
	jw.now = jw.now.Add(31 * time.Second) // 10:01:01
	jw.pass()
	if _, ok := jw.rec.runs["20261124T1001Z"]; !ok || len(jw.rec.runs) != 1 {
		t.Fatalf("runs after the first firing: %v", keysOf(jw.rec.runs))
	}
	jw.runUntilFinished("20261124T1001Z", 0)
	// The leader is away for an hour: one run on its return.
	jw.now = time.Date(2026, 11, 24, 11, 2, 10, 0, time.UTC)
	jw.pass()
	jw.pass()
	if len(jw.rec.runs) != 2 {
		t.Fatalf("after downtime: runs %v, want one more", keysOf(jw.rec.runs))
	}
	if got := jw.rec.schedule.sched.LastScheduleTime; !got.Equal(jw.now) {
		t.Errorf("last schedule time %s, want now", got)
	}
}

func TestScheduledJobConcurrencyPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy      string
		wantRuns    int
		wantSkipped int
		wantOld     string // state of the first run after the second firing
	}{
		{quadlet.ConcurrencyForbid, 1, 1, api.RunRunning},
		{quadlet.ConcurrencyAllow, 2, 0, api.RunRunning},
		{quadlet.ConcurrencyReplace, 2, 0, api.RunFailed},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			jw := newJobWorld(t, jobWorkload(t, "cron", 1, "  schedule: \"*/1 * * * *\"\n  concurrencyPolicy: "+tc.policy+"\n"))
			jw.now = time.Date(2026, 11, 24, 10, 0, 30, 0, time.UTC)
			jw.pass()
			jw.now = jw.now.Add(time.Minute)
			jw.pass()
			jw.pass() // its instance
			first := jw.as[0]
			jw.now = jw.now.Add(time.Minute) // the first run still running
			p := jw.pass()
			if len(jw.rec.runs) != tc.wantRuns || jw.rec.schedule.sched.Skipped != tc.wantSkipped {
				t.Fatalf("runs %v skipped %d; want %d runs, %d skipped", keysOf(jw.rec.runs), jw.rec.schedule.sched.Skipped,
					tc.wantRuns, tc.wantSkipped)
			}
			old := jw.rec.runs["20261124T1001Z"].run
			if old.State != tc.wantOld {
				t.Fatalf("first run %+v, want %s", old, tc.wantOld)
			}
			stopped := slices.ContainsFunc(p.Delete, func(a api.Assignment) bool { return a.InstanceID == first.InstanceID })
			if replace := tc.policy == quadlet.ConcurrencyReplace; stopped != replace || (replace && old.Reason != api.RunReasonReplaced) {
				t.Errorf("first run's instance stopped %v, reason %q", stopped, old.Reason)
			}
		})
	}
}

func TestJobHistoryLimits(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "cron", 1, "  schedule: \"*/1 * * * *\"\n  successfulJobsHistoryLimit: 2\n  failedJobsHistoryLimit: 1\n  backoffLimit: 0\n"))
	jw.now = time.Date(2026, 11, 24, 10, 0, 30, 0, time.UTC)
	jw.pass()
	var names []string
	for i, code := range []int{0, 0, 1, 0, 1} {
		jw.now = time.Date(2026, 11, 24, 10, 1+i, 1, 0, time.UTC)
		jw.pass()
		name := fmt.Sprintf("20261124T10%02dZ", 1+i)
		names = append(names, name)
		jw.runUntilFinished(name, code)
	}
	jw.pass()
	// Succeeded: runs 1, 2 and 4, the newest two kept; failed: 3 and 5,
	// the newest kept.
	want := []string{names[1], names[3], names[4]}
	if got := keysOf(jw.rec.runs); !slices.Equal(got, want) {
		t.Fatalf("runs kept %v, want %v", got, want)
	}
	// The containers of the runs let go went with them.
	for _, a := range jw.as {
		if !slices.Contains(want, a.Run) {
			t.Errorf("assignment %s of run %s outlived its run", a.InstanceID, a.Run)
		}
	}
	if len(jw.as) != 3 {
		t.Errorf("%d assignments kept, want one per kept run", len(jw.as))
	}
}

func TestJobOrphansAndOldAssignments(t *testing.T) {
	t.Parallel()
	jw := newJobWorld(t, jobWorkload(t, "orph", 1, ""))
	orphan := api.Assignment{InstanceID: "orph-x", Node: "n1", Namespace: "ns1", Workload: "orph", Run: "g0"}
	old := api.Assignment{InstanceID: "orph-y", Node: "n1", Namespace: "ns1", Workload: "orph"}
	jw.as = []api.Assignment{orphan, old}
	p := jw.pass()
	if len(p.Delete) != 2 {
		t.Fatalf("deleted %v, want the orphan and the assignment without a run", ids(p.Delete))
	}
	if len(p.Jobs) != 1 || !slices.Equal(p.Jobs[0].MustBeAbsent, []string{resources.JobRunKey("ns1", "orph", "g0")}) {
		t.Fatalf("jobs %+v: the orphan's run key must be confirmed absent", p.Jobs)
	}
	p.dropWorkload("ns1", "orph")
	if !p.Empty() {
		t.Errorf("dropWorkload left %+v", p)
	}
}

func keysOf(m map[string]storedRun) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
