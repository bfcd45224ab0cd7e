package leader

import (
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

func TestDeriveWorkloadStatus(t *testing.T) {
	t.Parallel()
	const h1, h2 = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	now := time.Unix(1000, 0)
	meta := api.WorkloadMeta{Namespace: "ns1", Name: "web", Type: quadlet.TypeService, Generation: 2, SpecHash: h2}
	a1, a2, old := assigned("web", h2, "a", 1), assigned("web", h2, "b", 2), assigned("web", h1, "o", 0)
	a1.Generation, a2.Generation, old.Generation = 2, 2, 1
	running := func(a api.Assignment, health string) api.InstanceStatus {
		return api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning, HealthStatus: health}
	}
	failed := func(a api.Assignment) api.InstanceStatus {
		return api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceFailed, ExitCode: 1, Restarts: 2}
	}
	restarting := func(a api.Assignment) api.InstanceStatus {
		return api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstancePending, Restarts: 3, Message: "exited with code 1; restarting in 4s"}
	}
	tests := []struct {
		name      string
		meta      api.WorkloadMeta
		desired   int
		assigned  []api.Assignment
		reported  []api.InstanceStatus
		phase     string
		ready     int
		observed  int64
		applied   int64
		lastError string
	}{
		{name: "nothing assigned yet is pending", meta: meta, desired: 2, phase: api.PhasePending},
		{name: "assigned but not reported is pending", meta: meta, desired: 2, assigned: []api.Assignment{a1, a2},
			phase: api.PhasePending, observed: 2},
		{name: "one of two ready is progressing", meta: meta, desired: 2, assigned: []api.Assignment{a1, a2},
			reported: []api.InstanceStatus{running(a1, api.HealthHealthy), running(a2, api.HealthPending)},
			phase:    api.PhaseProgressing, ready: 1, observed: 2, applied: 2},
		{name: "all ready is ready", meta: meta, desired: 2, assigned: []api.Assignment{a1, a2},
			reported: []api.InstanceStatus{running(a1, api.HealthHealthy), running(a2, api.HealthNotApplicable)},
			phase:    api.PhaseReady, ready: 2, observed: 2, applied: 2},
		{name: "an unhealthy instance is degraded", meta: meta, desired: 2, assigned: []api.Assignment{a1, a2},
			reported: []api.InstanceStatus{running(a1, api.HealthHealthy), running(a2, api.HealthUnhealthy)},
			phase:    api.PhaseDegraded, ready: 1, observed: 2, applied: 2},
		{name: "a restarting instance is degraded", meta: meta, desired: 2, assigned: []api.Assignment{a1, a2},
			reported: []api.InstanceStatus{running(a1, api.HealthHealthy), restarting(a2)},
			phase:    api.PhaseDegraded, ready: 1, observed: 2, applied: 2,
			lastError: "instance web-bbbbbbbb-b: exited with code 1; restarting in 4s"},
		{name: "all failed is failed", meta: meta, desired: 1, assigned: []api.Assignment{a1},
			reported: []api.InstanceStatus{failed(a1)}, phase: api.PhaseFailed, observed: 2,
			lastError: "instance web-bbbbbbbb-a failed: exit code 1 after 2 restarts"},
		{name: "old instance still assigned is progressing, the old generation applied", meta: meta, desired: 1,
			assigned: []api.Assignment{old, a1}, reported: []api.InstanceStatus{running(old, api.HealthHealthy)},
			phase: api.PhaseProgressing, observed: 2, applied: 1},
		{name: "succeeded job is ready", meta: api.WorkloadMeta{Name: "j", Type: quadlet.TypeJob, Generation: 1, SpecHash: h2},
			desired: 1, assigned: []api.Assignment{a1},
			reported: []api.InstanceStatus{{InstanceID: a1.InstanceID, Phase: api.InstanceSucceeded}},
			phase:    api.PhaseReady, observed: 1, applied: 1},
		{name: "zero replicas with nothing left is ready", meta: meta, desired: 0, phase: api.PhaseReady, observed: 2, applied: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := map[string]api.InstanceStatus{}
			for _, r := range tc.reported {
				rep[r.InstanceID] = r
			}
			f := WorkloadFacts{Meta: tc.meta, TemplateHash: h2, Desired: tc.desired, Assigned: tc.assigned, Reported: rep}
			got := DeriveWorkloadStatus(f, api.WorkloadStatus{}, now)
			if got.Phase != tc.phase || got.Ready != tc.ready || got.Desired != tc.desired || got.ObservedGeneration != tc.observed ||
				got.AppliedGeneration != tc.applied || got.LastError != tc.lastError {
				t.Fatalf("got phase %s ready %d/%d observed %d applied %d lastError %q; want %s %d/%d %d %d %q",
					got.Phase, got.Ready, got.Desired, got.ObservedGeneration, got.AppliedGeneration, got.LastError,
					tc.phase, tc.ready, tc.desired, tc.observed, tc.applied, tc.lastError)
			}
			if len(got.Conditions) == 0 || got.Conditions[0].Type != ConditionReady {
				t.Fatalf("no Ready condition: %+v", got.Conditions)
			}
			again := DeriveWorkloadStatus(f, got, now.Add(time.Minute))
			if !statusEqual(again, got) || !again.UpdatedAt.Equal(got.UpdatedAt) {
				t.Fatalf("deriving again from the result changed it:\n%+v\n%+v", got, again)
			}
		})
	}
}

// factSet is the full set of facts of one Git-built workload, each a
// producer's, to add one at a time.
func factSet() (WorkloadFacts, []func(*WorkloadFacts)) {
	const tmplHash = "cccccccccccc"
	commit := strings.Repeat("c", 40)
	a := assigned("app", tmplHash, "a", 1)
	a.Generation = 3
	base := WorkloadFacts{
		Meta:    api.WorkloadMeta{Namespace: "ns1", Name: "app", Type: quadlet.TypeService, Generation: 3},
		Desired: 1, FromGit: true, TemplateHash: tmplHash, Reported: map[string]api.InstanceStatus{},
	}
	add := []func(*WorkloadFacts){
		func(f *WorkloadFacts) { // placement
			f.Assigned = []api.Assignment{a}
		},
		func(f *WorkloadFacts) { // app sources: the last resolution failed
			f.App = &api.AppSource{Namespace: "ns1", Workload: "app", Repository: "https://git.example.com/app.git",
				Commit: commit, LastError: "ls-remote: connection refused"}
		},
		func(f *WorkloadFacts) { // a node's build of the commit failed
			f.Builds = append(f.Builds, api.Build{Node: "n2", Commit: commit, State: api.BuildFailed, Error: "exit status 1", LogTail: "RUN false\n"})
		},
		func(f *WorkloadFacts) { // another node's build of it failed too
			f.Builds = append(f.Builds, api.Build{Node: "n1", Commit: commit, State: api.BuildFailed, Error: "exit status 2"})
		},
		func(f *WorkloadFacts) { // gitsync: the directory is invalid at a newer commit
			f.PathError = &api.PathError{Path: "apps/app", Error: "apps/app/workload.kat:7: bad", Commit: strings.Repeat("d", 40)}
		},
		func(f *WorkloadFacts) { // the agent's report
			f.Reported = map[string]api.InstanceStatus{a.InstanceID: {InstanceID: a.InstanceID, Phase: api.InstanceFailed, Message: "build failed"}}
		},
	}
	return base, add
}

// TestDeriveWorkloadStatusAnyOrder is a property test: the facts of a
// workload arrive one at a time in every order, and the status derived after
// each arrival (from the status before it, as the loop does) ends the same
// for every order, with every producer's condition present.
func TestDeriveWorkloadStatusAnyOrder(t *testing.T) {
	t.Parallel()
	_, add := factSet()
	var want *api.WorkloadStatus
	n := 0
	permute(len(add), func(order []int) {
		n++
		f, add := factSet() // fresh facts per order
		var st api.WorkloadStatus
		now := time.Unix(1000, 0)
		for _, i := range order {
			add[i](&f)
			now = now.Add(time.Second)
			st = DeriveWorkloadStatus(f, st, now)
		}
		for _, c := range []string{ConditionReady, ConditionStalled, ConditionBuildFailed, ConditionSourceResolved} {
			if condition(st, c) == nil {
				t.Fatalf("order %v: condition %s lost: %+v", order, c, st.Conditions)
			}
		}
		if want == nil {
			want = &st
			return
		}
		if !sameStatus(st, *want) {
			t.Fatalf("order %v: status\n%+v\nwant\n%+v", order, st, *want)
		}
	})
	if n != 720 {
		t.Fatalf("%d orders tried, want 720", n)
	}
	if b := condition(*want, ConditionBuildFailed); !strings.Contains(b.Message, "node n1") || !strings.Contains(b.Message, "node n2") {
		t.Errorf("BuildFailed %q must name both nodes", b.Message)
	}
	if want.Phase != api.PhaseFailed || !strings.HasPrefix(want.LastError, "commit dddddddddddd: apps/app") {
		t.Errorf("phase %s, last error %q", want.Phase, want.LastError)
	}
}

// TestDeriveWorkloadStatusKeepsTransitionTimes: a condition keeps its
// transition time while it holds, whatever else changes.
func TestDeriveWorkloadStatusKeepsTransitionTimes(t *testing.T) {
	t.Parallel()
	f, add := factSet()
	for _, a := range add {
		a(&f)
	}
	t0 := time.Unix(1000, 0)
	st := DeriveWorkloadStatus(f, api.WorkloadStatus{}, t0)
	f.Builds = f.Builds[:1] // one build failure fewer: BuildFailed's message changes
	st2 := DeriveWorkloadStatus(f, st, t0.Add(time.Hour))
	for _, c := range st2.Conditions {
		if !c.LastTransitionTime.Equal(t0) {
			t.Errorf("%s moved its transition time to %s", c.Type, c.LastTransitionTime)
		}
	}
	if !st2.UpdatedAt.Equal(t0.Add(time.Hour)) {
		t.Errorf("UpdatedAt %s: the status changed, it must move", st2.UpdatedAt)
	}
	f.PathError = nil
	st3 := DeriveWorkloadStatus(f, st2, t0.Add(2*time.Hour))
	if c := condition(st3, ConditionStalled); c == nil || c.Reason != ReasonInstanceFailed || !c.LastTransitionTime.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("Stalled after the directory was fixed: %+v, want InstanceFailed since now", c)
	}
}

// permute calls f with every permutation of 0..n-1.
func permute(n int, f func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			f(append([]int(nil), p...))
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// TestDeriveWorkloadStatusPending: instances placement could not place
// show in the status with the scheduler's reason and a false Scheduled
// condition; another error, when there is one, stays the last error.
func TestDeriveWorkloadStatusPending(t *testing.T) {
	t.Parallel()
	const h = "aaaaaaaaaaaa"
	a := assigned("web", h, "a", 1)
	f := WorkloadFacts{
		Meta:    api.WorkloadMeta{Namespace: "ns1", Name: "web", Type: quadlet.TypeService, Generation: 1, SpecHash: h},
		Desired: 3, TemplateHash: h, Assigned: []api.Assignment{a},
		Reported: map[string]api.InstanceStatus{a.InstanceID: {InstanceID: a.InstanceID, Phase: api.InstanceRunning}},
		Unplaced: 2, UnplacedReason: "3 nodes: 3 insufficient memory",
	}
	st := DeriveWorkloadStatus(f, api.WorkloadStatus{}, time.Unix(1, 0))
	c := condition(st, ConditionScheduled)
	if st.Unplaced != 2 || st.UnplacedReason != f.UnplacedReason || c == nil || c.Status != api.ConditionFalse ||
		c.Reason != ReasonUnschedulable || st.LastError != "2 instances fit on no node: 3 nodes: 3 insufficient memory" {
		t.Fatalf("status = %+v", st)
	}
	f.Reported[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceFailed, Message: "exit 1"}
	if st := DeriveWorkloadStatus(f, st, time.Unix(2, 0)); st.LastError != "instance "+a.InstanceID+": exit 1" {
		t.Errorf("last error with a failed instance = %q", st.LastError)
	}
	f.Unplaced = 0
	if st := DeriveWorkloadStatus(f, st, time.Unix(3, 0)); st.Unplaced != 0 || st.UnplacedReason != "" || condition(st, ConditionScheduled) != nil {
		t.Errorf("placed: status = %+v", st)
	}
}
