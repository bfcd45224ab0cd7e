package leader

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// strategyWorkload is a Service "web" of replicas running cmd, with
// updateStrategy (YAML lines under it, indented four spaces) when not empty.
func strategyWorkload(t testing.TB, gen int64, replicas int, cmd, strategy string) workload {
	t.Helper()
	us := ""
	if strategy != "" {
		us = "  updateStrategy:\n" + strategy
	}
	files := map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: web
  namespace: ns1
spec:
  type: Service
  replicas: %d
%s  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", %q]
`, replicas, us, cmd)}
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: "web", Type: quadlet.TypeService, Generation: gen}, files)
}

func webTemplate(t testing.TB, w workload) string { t.Helper(); return w.Spec.TemplateHash }

// instances are n assignments of template hash, created at created+i.
func instances(hash, prefix string, n, created int) []api.Assignment {
	var out []api.Assignment
	for i := range n {
		a := assigned("web", hash, fmt.Sprintf("%s%d", prefix, i), created+i)
		a.Type = quadlet.TypeService
		out = append(out, a)
	}
	return out
}

func readyReports(as ...[]api.Assignment) map[string]api.InstanceStatus {
	out := map[string]api.InstanceStatus{}
	for _, list := range as {
		for _, a := range list {
			out[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning,
				HealthStatus: api.HealthHealthy}
		}
	}
	return out
}

func TestRollingUpdatePlan(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	v1 := strategyWorkload(t, 1, 3, "v1", "")
	h1 := webTemplate(t, v1)
	type want struct{ put, leave, del int }
	tests := []struct {
		name    string
		desired workload
		current func(h2 string) []api.Assignment
		ready   func(cur []api.Assignment, h2 string) map[string]api.InstanceStatus
		want    want
		// leftOld are the old instances expected to stay (by suffix).
		wantLeaveIDs []string
	}{
		{
			name:    "maxSurge 1 (default) starts one new instance and stops none",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(string) []api.Assignment { return instances(h1, "o", 3, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{put: 1},
		},
		{
			name:    "maxSurge as a count",
			desired: strategyWorkload(t, 2, 3, "v2", "    rolling: {maxSurge: 2}\n"),
			current: func(string) []api.Assignment { return instances(h1, "o", 3, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{put: 2},
		},
		{
			name:    "maxSurge as a percentage of replicas, rounded up",
			desired: strategyWorkload(t, 2, 4, "v2", "    rolling: {maxSurge: \"30%\"}\n"),
			current: func(string) []api.Assignment { return instances(h1, "o", 4, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{put: 2},
		},
		{
			name:    "a new instance not ready yet stops no old one",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(h2 string) []api.Assignment {
				return append(instances(h1, "o", 3, 1), instances(h2, "n", 1, 10)...)
			},
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur[:3])
			},
			want: want{},
		},
		{
			name:    "a ready new instance lets the oldest old one leave and the next new one start",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(h2 string) []api.Assignment {
				return append(instances(h1, "o", 3, 1), instances(h2, "n", 1, 10)...)
			},
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want:         want{put: 1, leave: 1},
			wantLeaveIDs: []string{InstanceID("web", h1, "o0")},
		},
		{
			name:    "scaling down with a new spec stops surplus old instances first",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(string) []api.Assignment { return instances(h1, "o", 5, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{put: 1, leave: 2},
		},
		{
			name:    "maxSurge 0 stops one old instance before its replacement",
			desired: strategyWorkload(t, 2, 3, "v2", "    rolling: {maxSurge: 0}\n"),
			current: func(string) []api.Assignment { return instances(h1, "o", 3, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{put: 1, leave: 1},
		},
		{
			name:    "old instances that serve nobody go once the rest hold the capacity",
			desired: strategyWorkload(t, 2, 2, "v2", ""),
			current: func(h2 string) []api.Assignment {
				return append(instances(h1, "o", 1, 1), instances(h2, "n", 2, 10)...)
			},
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur[1:])
			},
			want: want{del: 1},
		},
		{
			name:    "old instances that never get ready take room",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(string) []api.Assignment { return instances(h1, "o", 3, 1) },
			want:    want{put: 1},
		},
		{
			name:    "old instances that never get ready make room one at a time",
			desired: strategyWorkload(t, 2, 3, "v2", ""),
			current: func(h2 string) []api.Assignment {
				return append(instances(h1, "o", 3, 1), instances(h2, "n", 1, 10)...)
			},
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur[3:])
			},
			want: want{put: 1, del: 1},
		},
		{
			name:    "Simultaneous stops every old instance and starts none",
			desired: strategyWorkload(t, 2, 3, "v2", "    type: Simultaneous\n"),
			current: func(string) []api.Assignment { return instances(h1, "o", 3, 1) },
			ready: func(cur []api.Assignment, _ string) map[string]api.InstanceStatus {
				return readyReports(cur)
			},
			want: want{leave: 3},
		},
		{
			name:    "Simultaneous waits for leaving old instances to go",
			desired: strategyWorkload(t, 2, 3, "v2", "    type: Simultaneous\n"),
			current: func(string) []api.Assignment {
				as := instances(h1, "o", 1, 1)
				as[0].LeavingAt = now.Add(-time.Second)
				return as
			},
			want: want{},
		},
		{
			name:    "Simultaneous starts every new instance once no old one is left",
			desired: strategyWorkload(t, 2, 3, "v2", "    type: Simultaneous\n"),
			current: func(string) []api.Assignment { return nil },
			want:    want{put: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h2 := webTemplate(t, tc.desired)
			cur := tc.current(h2)
			var reported map[string]api.InstanceStatus
			if tc.ready != nil {
				reported = tc.ready(cur, h2)
			}
			n := 0
			plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{tc.desired}, Current: cur, Reported: reported,
				Now: now, DrainDelay: 2 * time.Second, NewSuffix: func() string { n++; return fmt.Sprint("s", n) }})
			got := want{put: len(plan.Put), leave: len(plan.Leave), del: len(plan.Delete)}
			if got != tc.want {
				t.Fatalf("put %v leave %v delete %v, want %+v", ids(plan.Put), ids(plan.Leave), ids(plan.Delete), tc.want)
			}
			for _, a := range plan.Put {
				if a.TemplateHash != h2 {
					t.Errorf("new instance %s runs template %s, want %s", a.InstanceID, a.TemplateHash, h2)
				}
			}
			for _, a := range plan.Leave {
				if !a.LeavingAt.Equal(now) || a.TemplateHash != h1 {
					t.Errorf("leaving %s: LeavingAt %v template %s", a.InstanceID, a.LeavingAt, a.TemplateHash)
				}
				if w, ok := plan.Wake["ns1/web"]; !ok || w.After(now.Add(2*time.Second)) {
					t.Errorf("wake = %v (set %v), want at the drain delay's end", w, ok)
				}
			}
			if tc.wantLeaveIDs != nil && !slices.Equal(ids(plan.Leave), tc.wantLeaveIDs) {
				t.Errorf("leaving %v, want %v", ids(plan.Leave), tc.wantLeaveIDs)
			}
		})
	}
}

func TestLeavingInstancesGoAfterTheDrainDelay(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	w := strategyWorkload(t, 1, 1, "v1", "")
	h := webTemplate(t, w)
	cur := instances(h, "a", 2, 1)
	cur[1].LeavingAt = now.Add(-3 * time.Second) // drained
	fresh := instances(h, "b", 1, 5)
	fresh[0].LeavingAt = now.Add(-time.Second) // still draining
	cur = append(cur, fresh...)
	plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{w}, Current: cur, Reported: readyReports(cur),
		Now: now, DrainDelay: 2 * time.Second, NewSuffix: func() string { return "x" }})
	if !slices.Equal(ids(plan.Delete), []string{cur[1].InstanceID}) || len(plan.Put) != 0 || len(plan.Leave) != 0 {
		t.Fatalf("put %v leave %v delete %v, want only %s deleted", ids(plan.Put), ids(plan.Leave), ids(plan.Delete), cur[1].InstanceID)
	}
	if got := plan.Wake["ns1/web"]; !got.Equal(now.Add(time.Second)) {
		t.Errorf("wake = %v, want %v (the draining instance's end)", got, now.Add(time.Second))
	}
}

// TestRollingUpdateKeepsCapacity runs a whole rolling update pass by pass:
// new instances become ready on the pass after they are placed, leaving
// ones are gone after the drain delay. At no point are fewer than replicas
// instances ready and in service, and the update finishes with replicas
// new instances and no old one.
func TestRollingUpdateKeepsCapacity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		replicas, from int
		strategy       string
	}{
		{"default maxSurge", 3, 3, ""},
		{"maxSurge 2", 5, 5, "    rolling: {maxSurge: 2}\n"},
		{"maxSurge 50%", 4, 4, "    rolling: {maxSurge: \"50%\"}\n"},
		{"scale up while rolling", 4, 2, ""},
		{"scale down while rolling", 2, 4, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			old := strategyWorkload(t, 1, tc.from, "v1", "")
			w := strategyWorkload(t, 2, tc.replicas, "v2", tc.strategy)
			cur := instances(webTemplate(t, old), "o", tc.from, 1)
			reported := readyReports(cur)
			n := 0
			floor := min(tc.replicas, tc.from)
			var ro map[string]api.Rollout
			for pass := range 60 {
				plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{w}, Current: cur, Reported: reported,
					Now: now, DrainDelay: 2 * time.Second, Rollouts: ro, NewSuffix: func() string { n++; return fmt.Sprint("s", n) }})
				ro = map[string]api.Rollout{}
				if r, ok := plan.Rollouts["ns1/web"]; ok {
					ro["ns1/web"] = r
				}
				cur = applyPlan(cur, plan)
				inService := 0
				for _, a := range cur {
					if _, ok := reported[a.InstanceID]; ok && !a.Leaving() {
						inService++
					}
				}
				if inService < floor {
					t.Fatalf("pass %d: %d instances ready and in service, want at least %d", pass, inService, floor)
				}
				if r := ro["ns1/web"]; r.Outcomes[2] == api.OutcomeSucceeded {
					if len(cur) != tc.replicas {
						t.Fatalf("succeeded with %d instances, want %d", len(cur), tc.replicas)
					}
					t.Logf("%s: rolled out in %d passes", tc.name, pass+1)
					return
				}
				// Instances placed in this pass are ready by the next.
				for _, a := range plan.Put {
					reported[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning,
						HealthStatus: api.HealthHealthy}
				}
				now = now.Add(time.Second)
			}
			t.Fatalf("no success after 60 passes: %v", ids(cur))
		})
	}
}

// applyPlan is what writing plan does to the current assignments.
func applyPlan(cur []api.Assignment, plan AssignmentPlan) []api.Assignment {
	byID := map[string]api.Assignment{}
	for _, a := range cur {
		byID[a.InstanceID] = a
	}
	for _, a := range plan.Delete {
		delete(byID, a.InstanceID)
	}
	for _, a := range append(plan.Leave, plan.Put...) {
		byID[a.InstanceID] = a
	}
	return slices.Collect(maps.Values(byID))
}

func TestStepRollout(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(10000, 0)
	off := false
	short := 60
	meta := func(gen int64) api.WorkloadMeta {
		return api.WorkloadMeta{Namespace: "ns1", Name: "web", Generation: gen}
	}
	counts := func(newReady, old int) api.RolloutCounts {
		return api.RolloutCounts{Desired: 3, New: 3, NewReady: newReady, Old: old, OldReady: old}
	}
	running := api.Rollout{Generation: 3, StartedAt: t0, ProgressAt: t0, MostNewReady: 1, FewestOld: 2, DeadlineSeconds: 60,
		Outcomes: map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeFailed}}
	failed := running
	failed.Outcomes = map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeFailed, 3: api.OutcomeFailed}
	failed.Failure = &api.RolloutFailure{Generation: 3, At: t0, Message: "x", RollbackTo: 1}
	tests := []struct {
		name     string
		prev     api.Rollout
		meta     api.WorkloadMeta
		strategy *quadlet.UpdateStrategy
		counts   api.RolloutCounts
		now      time.Time
		// want
		outcome      string
		rollbackTo   int64
		progressAt   time.Time
		failure      string // substring of the failure's message; "-" none
		wakeAtLatest time.Time
		failed       string // rolloutFacts.Failed
		nodeWait     bool   // rolloutFacts.NodeWait
	}{
		{name: "past the deadline while waiting only on nodes' retries: held, half a deadline more", prev: running, meta: meta(3),
			strategy: &quadlet.UpdateStrategy{ProgressDeadlineSeconds: &short}, counts: counts(1, 2), now: t0.Add(61 * time.Second), nodeWait: true,
			progressAt: t0.Add(61 * time.Second), failure: "-", wakeAtLatest: t0.Add(91 * time.Second)},
		{name: "waiting on nodes' retries within the first half of the deadline: unchanged", prev: running, meta: meta(3),
			strategy: &quadlet.UpdateStrategy{ProgressDeadlineSeconds: &short}, counts: counts(1, 2), now: t0.Add(20 * time.Second), nodeWait: true,
			progressAt: t0, failure: "-", wakeAtLatest: t0.Add(30 * time.Second)},
		{name: "a node-by-node update that stopped fails even while waiting on nodes", prev: running, meta: meta(3), counts: counts(0, 3),
			now: t0.Add(5 * time.Second), failed: "node1: verify exited 3", nodeWait: true, outcome: api.OutcomeFailed, rollbackTo: 1, progressAt: t0,
			failure: "generation 3 failed: node1: verify exited 3"},
		{name: "a node-by-node update that stopped fails at once and rolls back", prev: running, meta: meta(3), counts: counts(0, 3),
			now: t0.Add(5 * time.Second), failed: "node1: verify exited 3", outcome: api.OutcomeFailed, rollbackTo: 1, progressAt: t0,
			failure: "generation 3 failed: node1: verify exited 3; rolling back to generation 1's files"},
		{name: "a new generation starts a rollout", prev: api.Rollout{Generation: 2}, meta: meta(3), counts: counts(0, 3), now: t0,
			progressAt: t0, failure: "-", wakeAtLatest: t0.Add(600 * time.Second)},
		{name: "one more new instance ready is progress", prev: running, meta: meta(3), counts: counts(2, 2), now: t0.Add(50 * time.Second),
			progressAt: t0.Add(50 * time.Second), failure: "-", wakeAtLatest: t0.Add(650 * time.Second)},
		{name: "one old instance fewer is progress", prev: running, meta: meta(3), counts: counts(1, 1), now: t0.Add(50 * time.Second),
			progressAt: t0.Add(50 * time.Second), failure: "-"},
		{name: "readiness lost and regained is not progress", prev: running, meta: meta(3), counts: counts(1, 2), now: t0.Add(50 * time.Second),
			progressAt: t0, failure: "-"},
		{name: "every new instance ready and no old one left succeeds", prev: running, meta: meta(3), counts: counts(3, 0),
			now: t0.Add(5 * time.Second), outcome: api.OutcomeSucceeded, failure: "-"},
		{name: "no progress within the deadline fails and rolls back to the last success", prev: running, meta: meta(3),
			strategy: &quadlet.UpdateStrategy{ProgressDeadlineSeconds: &short}, counts: counts(1, 2), now: t0.Add(61 * time.Second),
			outcome: api.OutcomeFailed, rollbackTo: 1, progressAt: t0, failure: "generation 3 made no progress for 60s: 1 of 3 new instances ready, 2 old instances left; the cause; rolling back to generation 1's files"},
		{name: "autoRollback false fails without a rollback", prev: running, meta: meta(3),
			strategy: &quadlet.UpdateStrategy{ProgressDeadlineSeconds: &short, AutoRollback: &off}, counts: counts(1, 2), now: t0.Add(61 * time.Second),
			outcome: api.OutcomeFailed, failure: "autoRollback is off"},
		{name: "no earlier success: nothing to roll back to", prev: api.Rollout{Generation: 1, StartedAt: t0, ProgressAt: t0, FewestOld: 0},
			meta: meta(1), counts: counts(0, 0), now: t0.Add(601 * time.Second), outcome: api.OutcomeFailed, failure: "nothing to roll back to"},
		{name: "a failed generation still current asks for its rollback again", prev: failed, meta: meta(3), counts: counts(1, 2),
			now: t0.Add(70 * time.Second), outcome: api.OutcomeFailed, rollbackTo: 1, progressAt: t0, failure: "x"},
		{name: "the automatic rollback's generation keeps the failure", prev: failed,
			meta:   api.WorkloadMeta{Generation: 4, Rollback: &api.RollbackRef{From: 3, To: 1, Auto: true}},
			counts: counts(0, 3), now: t0.Add(70 * time.Second), progressAt: t0.Add(70 * time.Second), failure: "x"},
		{name: "a later apply clears the failure", prev: failed, meta: meta(4), counts: counts(0, 3), now: t0.Add(70 * time.Second),
			progressAt: t0.Add(70 * time.Second), failure: "-"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.prev.Outcomes)
			next, to, wake := stepRollout(tc.prev, rolloutFacts{Meta: tc.meta, Strategy: tc.strategy, Counts: tc.counts, Cause: "the cause", Failed: tc.failed, NodeWait: tc.nodeWait, Now: tc.now})
			if got := next.Outcomes[tc.meta.Generation]; got != tc.outcome {
				t.Errorf("outcome = %q, want %q", got, tc.outcome)
			}
			if to != tc.rollbackTo {
				t.Errorf("rollbackTo = %d, want %d", to, tc.rollbackTo)
			}
			if !tc.progressAt.IsZero() && !next.ProgressAt.Equal(tc.progressAt) {
				t.Errorf("progressAt = %v, want %v", next.ProgressAt, tc.progressAt)
			}
			switch {
			case tc.failure == "-" && next.Failure != nil:
				t.Errorf("failure = %+v, want none", next.Failure)
			case tc.failure != "-" && (next.Failure == nil || !strings.Contains(next.Failure.Message, tc.failure)):
				t.Errorf("failure = %+v, want one saying %q", next.Failure, tc.failure)
			}
			if tc.outcome == "" && wake.IsZero() {
				t.Errorf("no wake-up for a rollout in progress")
			}
			if !tc.wakeAtLatest.IsZero() && wake.After(tc.wakeAtLatest) {
				t.Errorf("wake = %v, want by %v", wake, tc.wakeAtLatest)
			}
			if next.Generation != tc.meta.Generation || next.Counts != tc.counts {
				t.Errorf("record = %+v", next)
			}
			if !maps.Equal(before, tc.prev.Outcomes) {
				t.Errorf("the step changed prev's outcomes: %v, was %v", tc.prev.Outcomes, before)
			}
		})
	}
}

// TestLeaderRollsBackAFailedRollout: on a real etcd, a new generation whose
// instance never gets healthy fails its rollout after the progress deadline;
// the leader marks the workload RolloutFailed with the cause and applies
// generation 1's files again as generation 3, while the old instances keep
// running throughout; generation 3 then succeeds at once with them.
func TestLeaderRollsBackAFailedRollout(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	_, stop := e.run(Config{DrainDelay: 100 * time.Millisecond})
	defer stop()
	v1 := strategyWorkload(t, 0, 2, "v1", "")
	old := e.rollOutV1(v1)

	start := time.Now()
	v2 := strategyWorkload(t, 0, 2, "v2", "    progressDeadlineSeconds: 1\n")
	e.apply(v2.Files, api.APIOwner())
	broken := e.instanceOf("web", 2)
	unhealthy := running(broken)
	unhealthy.HealthStatus = api.HealthUnhealthy
	e.report(2, running(old[0]), running(old[1]), unhealthy)
	w := e.generation("web", 3)
	if rb := w.Rollback; rb == nil || *rb != (api.RollbackRef{From: 2, To: 1, Auto: true}) || w.SpecHash != v1.Meta.SpecHash {
		t.Fatalf("generation 3: rollback %+v, spec hash %s, want generation 1's %s", w.Rollback, w.SpecHash, v1.Meta.SpecHash)
	}
	polltest.Until(t, 10*time.Second, "the broken instance gone, RolloutFailed shown", func() bool {
		as := e.assignments("web")
		c := condition(e.status("web"), ConditionRolloutFailed)
		return len(as) == 2 && c != nil
	})
	t.Logf("generation 2 failed and was rolled back %s after it was applied (progress deadline 1s)", time.Since(start).Round(time.Millisecond))
	c := condition(e.status("web"), ConditionRolloutFailed)
	if c.Reason != ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, "generation 2 made no progress for 1s") ||
		!strings.Contains(c.Message, broken.InstanceID) || !strings.Contains(c.Message, "health check fails") ||
		!strings.Contains(c.Message, "rolling back to generation 1's files") {
		t.Errorf("RolloutFailed = %+v", c)
	}
	for _, a := range e.assignments("web") {
		if a.Generation != 1 || a.Leaving() {
			t.Errorf("instance %s (generation %d, leaving %v): want the old instances kept in service", a.InstanceID, a.Generation, a.Leaving())
		}
	}
	polltest.Until(t, 10*time.Second, "generation 3 rolled out", func() bool {
		ro, _, err := e.repo.GetRollout(e.ctx, "ns1", "web")
		return err == nil && ro.Outcomes[3] == api.OutcomeSucceeded
	})
	h, err := e.repo.WorkloadHistory(e.ctx, "ns1", "web")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range h {
		got = append(got, fmt.Sprintf("%d %s", en.Generation, en.Outcome))
	}
	if want := []string{"1 succeeded", "2 rolled back", "3 succeeded"}; !slices.Equal(got, want) {
		t.Errorf("history = %q, want %q", got, want)
	}
}

// TestLeaderHoldsTheDeadlineWhileInstancesWaitOnTheirNode: on a real etcd,
// a rollout whose new instance waits only to retry a step its node failed
// (NodeRetry: the runtime or the node's network down) does not fail at its
// progress deadline of 1s, however long the wait: the leader moves
// ProgressAt on. Once the instance no longer waits on its node but is still
// not ready, the deadline runs out as before and the rollout is rolled back.
func TestLeaderHoldsTheDeadlineWhileInstancesWaitOnTheirNode(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	_, stop := e.run(Config{DrainDelay: 100 * time.Millisecond})
	defer stop()
	old := e.rollOutV1(strategyWorkload(t, 0, 2, "v1", ""))

	e.apply(strategyWorkload(t, 0, 2, "v2", "    progressDeadlineSeconds: 1\n").Files, api.APIOwner())
	waiting := e.instanceOf("web", 2)
	pending := api.InstanceStatus{InstanceID: waiting.InstanceID, Namespace: waiting.Namespace, WorkloadName: waiting.Workload,
		Phase: api.InstancePending, HealthStatus: api.HealthNotApplicable, NodeRetry: true,
		Message: "the node's container network is not ready: network kat-n1 (subnet 10.1.0.0/24): subnet in use"}
	e.report(2, running(old[0]), running(old[1]), pending)
	// ProgressAt moves on every half deadline while the instance waits:
	// three moves are 1.5 deadlines, past the one a rollout without the
	// hold would have failed at.
	var first time.Time
	moves := 0
	polltest.Until(t, 20*time.Second, "ProgressAt moved three times while the instance waits on its node", func() bool {
		ro, _, err := e.repo.GetRollout(e.ctx, "ns1", "web")
		if err != nil || ro.Generation < 2 {
			return false
		}
		if out := ro.Outcomes[2]; out != "" || ro.Generation > 2 {
			t.Fatalf("generation 2's rollout ended %s while its instance waited on its node: %+v", out, ro.Failure)
		}
		switch {
		case first.IsZero():
			first = ro.ProgressAt
		case ro.ProgressAt.After(first):
			first, moves = ro.ProgressAt, moves+1
		}
		return moves >= 3
	})

	// The same instance not ready for a cause of its own: the deadline
	// runs out, and the rollout rolls back.
	pending.NodeRetry, pending.Message = false, "exited with code 1; restarting in 2s"
	e.report(3, running(old[0]), running(old[1]), pending)
	e.generation("web", 3)
	ro, _, err := e.repo.GetRollout(e.ctx, "ns1", "web")
	if err != nil {
		t.Fatal(err)
	}
	if ro.Outcomes[2] != api.OutcomeFailed {
		t.Errorf("generation 2's outcome = %q, want %q", ro.Outcomes[2], api.OutcomeFailed)
	}
}

// rollOutV1 applies v1, a workload of 2 replicas, as generation 1, reports
// its instances running and waits until its rollout succeeded; it returns
// the instances.
func (e *leaderEnv) rollOutV1(v1 workload) []api.Assignment {
	e.t.Helper()
	e.apply(v1.Files, api.APIOwner())
	polltest.Until(e.t, 10*time.Second, "two instances of generation 1", func() bool { return len(e.assignments("web")) == 2 })
	old := e.assignments("web")
	e.report(1, running(old[0]), running(old[1]))
	polltest.Until(e.t, 10*time.Second, "generation 1 rolled out", func() bool {
		ro, _, err := e.repo.GetRollout(e.ctx, "ns1", "web")
		return err == nil && ro.Outcomes[1] == api.OutcomeSucceeded
	})
	return old
}
