package leader

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// jobFiles is a Job of namespace ns1 with the given job.kat spec lines.
func jobFiles(t testing.TB, name, spec string) map[string][]byte {
	t.Helper()
	return jobWorkload(t, name, 1, spec).Files
}

// runs returns workload name's run records, by run.
func (e *leaderEnv) runs(name string) map[string]api.JobRun {
	e.t.Helper()
	all, err := e.repo.ListJobRuns(e.ctx, "ns1")
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]api.JobRun{}
	for _, r := range all {
		if r.Name == name {
			out[r.Run] = r
		}
	}
	return out
}

// reportAt writes node n1's status at time at.
func (e *leaderEnv) reportAt(at time.Time, is ...api.InstanceStatus) {
	e.t.Helper()
	if err := e.repo.PutNodeStatus(e.ctx, api.NodeStatus{NodeName: "n1", Timestamp: at.Unix(), WorkloadInstances: is}); err != nil {
		e.t.Fatal(err)
	}
}

func exitedWith(a api.Assignment, code int) api.InstanceStatus {
	phase := api.InstanceSucceeded
	if code != 0 {
		phase = api.InstanceFailed
	}
	return api.InstanceStatus{InstanceID: a.InstanceID, Namespace: a.Namespace, WorkloadName: a.Workload,
		Phase: phase, State: "exited", ExitCode: code}
}

// TestJobRunSurvivesALeaderChange: a Job with completions 3, parallelism 2
// and backoffLimit 1 runs its instances from etcd records; the leader stops
// halfway and a new term continues the run without a duplicate or a lost
// instance: exactly 3 successes and 1 failure, 4 instances in all, never
// more than 2 unfinished at once; its workload status ends Succeeded.
func TestJobRunSurvivesALeaderChange(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.apply(jobFiles(t, "batch", "  completions: 3\n  parallelism: 2\n  backoffLimit: 1\n"), api.APIOwner())
	seen := map[string]bool{}
	reports := map[string]api.InstanceStatus{}
	maxActive := 0
	observe := func() []api.Assignment {
		as := e.assignments("batch")
		var active []api.Assignment
		for _, a := range as {
			if a.Run != "g1" {
				t.Fatalf("assignment %s labelled %q, want run g1", a.InstanceID, a.Run)
			}
			seen[a.InstanceID] = true
			if _, done := reports[a.InstanceID]; !done {
				active = append(active, a)
			}
		}
		maxActive = max(maxActive, len(active))
		return active
	}
	report := func() {
		var is []api.InstanceStatus
		for _, r := range reports {
			is = append(is, r)
		}
		e.report(int64(len(reports)), is...)
	}
	_, stop := e.run(Config{})
	polltest.Until(t, 10*time.Second, "two instances placed", func() bool { return len(observe()) == 2 })
	active := observe()
	reports[active[0].InstanceID] = exitedWith(active[0], 0)
	reports[active[1].InstanceID] = exitedWith(active[1], 7)
	report()
	polltest.Until(t, 10*time.Second, "the failure retried and the next completion started", func() bool {
		r := e.runs("batch")["g1"]
		return r.Succeeded == 1 && r.Failed == 1 && len(observe()) == 2
	})
	stop()

	// A new term continues the same run.
	_, stop = e.run(Config{})
	defer stop()
	for _, a := range observe() {
		reports[a.InstanceID] = exitedWith(a, 0)
	}
	report()
	polltest.Until(t, 10*time.Second, "the run succeeded", func() bool {
		observe()
		return e.runs("batch")["g1"].State == api.RunSucceeded
	})
	run := e.runs("batch")["g1"]
	if run.Succeeded != 3 || run.Failed != 1 || run.Active != 0 || len(run.Instances) != 4 || len(seen) != 4 {
		t.Fatalf("run %+v; %d instances seen, want 4 (3 succeeded, 1 failed)", run, len(seen))
	}
	if maxActive > 2 {
		t.Errorf("%d instances unfinished at once, parallelism 2", maxActive)
	}
	polltest.Until(t, 10*time.Second, "the Job's status says Succeeded", func() bool {
		st := e.status("batch")
		c := condition(st, ConditionReady)
		return st.Phase == api.PhaseSucceeded && st.Ready == 3 && st.Desired == 3 && st.LastRun == "g1" &&
			c != nil && c.Status == api.ConditionTrue
	})
}

// TestJobDeadlineAndCronAcrossDowntime: with a clock the test moves, a run
// over its activeDeadlineSeconds is stopped (assignment deleted) and Failed
// with DeadlineExceeded; a scheduled Job fires at its minute, and after an
// hour without a leader a new term starts one run, not sixty, and shows the
// next firing in its status.
func TestJobDeadlineAndCronAcrossDowntime(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	clock := &fakeClock{now: time.Now().UTC().Truncate(time.Minute).Add(2 * time.Second)}
	e.reportAt(clock.Now())
	e.apply(jobFiles(t, "slow", "  activeDeadlineSeconds: 30\n"), api.APIOwner())
	e.apply(jobFiles(t, "cron", "  schedule: \"*/1 * * * *\"\n"), api.APIOwner())
	_, stop := e.run(Config{Now: clock.Now, Resync: 100 * time.Millisecond})
	polltest.Until(t, 10*time.Second, "slow's instance placed, cron armed", func() bool {
		return len(e.assignments("slow")) == 1 && e.status("cron").Phase == api.PhaseScheduled
	})
	a := e.assignments("slow")[0]
	e.reportAt(clock.Now(), running(a))
	start := clock.Now()
	clock.set(start.Add(31 * time.Second))
	e.reportAt(clock.Now(), running(a))
	polltest.Until(t, 10*time.Second, "slow stopped at its deadline", func() bool {
		r := e.runs("slow")["g1"]
		return r.State == api.RunFailed && r.Reason == api.RunReasonDeadlineExceeded && len(e.assignments("slow")) == 0
	})
	polltest.Until(t, 10*time.Second, "slow's status says Failed", func() bool {
		st := e.status("slow")
		c := condition(st, ConditionStalled)
		return st.Phase == api.PhaseFailed && c != nil && c.Reason == api.RunReasonDeadlineExceeded
	})
	// The cron Job's first firing.
	firing := start.Truncate(time.Minute).Add(time.Minute)
	clock.set(firing.Add(time.Second))
	e.reportAt(clock.Now())
	first := firing.UTC().Format("20060102T1504Z")
	polltest.Until(t, 10*time.Second, "cron fired at its minute", func() bool {
		_, ok := e.runs("cron")[first]
		return ok && len(e.assignments("cron")) == 1
	})
	e.reportAt(clock.Now(), exitedWith(e.assignments("cron")[0], 0))
	polltest.Until(t, 10*time.Second, "cron's first run succeeded", func() bool {
		return e.runs("cron")[first].State == api.RunSucceeded
	})
	stop()

	// An hour without a leader; then a new term.
	clock.set(firing.Add(time.Hour + 10*time.Second))
	e.reportAt(clock.Now())
	l, stop := e.run(Config{Now: clock.Now, Resync: 100 * time.Millisecond})
	defer stop()
	polltest.Until(t, 10*time.Second, "one run after the downtime", func() bool { return len(e.runs("cron")) == 2 })
	passes := l.placementPasses.Load()
	polltest.Until(t, 10*time.Second, "ten more placement passes", func() bool { return l.placementPasses.Load() >= passes+10 })
	if n := len(e.runs("cron")); n != 2 {
		t.Fatalf("%d runs after an hour of downtime, want 2: missed firings stacked up", n)
	}
	want := firing.Add(time.Hour + time.Minute)
	polltest.Until(t, 10*time.Second, "the status names the next firing", func() bool {
		st := e.status("cron")
		return st.NextRunTime != nil && st.NextRunTime.Equal(want)
	})
}

// TestFinishedJobInstancesFreeTheirRequests: a Job whose instance asks for
// most of the node's memory runs its completions one after another: the
// exited instances' assignments stay (their run is in the history) but no
// longer count against the node.
func TestFinishedJobInstancesFreeTheirRequests(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	files := jobFiles(t, "big", "  completions: 3\n  parallelism: 3\n")
	files["workload.kat"] = []byte(strings.Replace(string(files["workload.kat"]), `container: {command: ["true"]}`,
		`container: {command: ["true"], resources: {limits: {memory: 200Mi}}}`, 1))
	e.apply(files, api.APIOwner())
	beat := func(is ...api.InstanceStatus) {
		st := api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), WorkloadInstances: is,
			Resources: api.NodeResources{Allocatable: api.ResourceList{CPU: "2", Memory: "300Mi"}}}
		if err := e.repo.PutNodeStatus(e.ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	_, stop := e.run(Config{})
	defer stop()
	var done []api.InstanceStatus
	for i := range 3 {
		polltest.Until(t, 10*time.Second, fmt.Sprintf("instance %d placed", i+1), func() bool { return len(e.assignments("big")) == i+1 })
		// The run's record is written after the assignment: wait for it.
		polltest.Until(t, 10*time.Second, fmt.Sprintf("the run counts instance %d active", i+1), func() bool { return e.runs("big")["g1"].Active == 1 })
		if n := len(e.assignments("big")); n != i+1 {
			t.Fatalf("%d instances placed with %d finished: one fits at a time", n, i)
		}
		as := e.assignments("big")
		for _, a := range as {
			if !slices.ContainsFunc(done, func(s api.InstanceStatus) bool { return s.InstanceID == a.InstanceID }) {
				done = append(done, exitedWith(a, 0))
			}
		}
		beat(done...)
	}
	polltest.Until(t, 10*time.Second, "the run succeeded", func() bool { return e.runs("big")["g1"].State == api.RunSucceeded })
}
