package leader

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// TestStepReplace covers the back-off between replacements of failed
// instances.
func TestStepReplace(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0).UTC()
	pol := ReplacePolicy{Base: 2 * time.Second, Cap: 10 * time.Second, Reset: time.Minute}
	rec := func(attempts int, last, next time.Duration, ids ...string) *api.ReplaceBackoff {
		return &api.ReplaceBackoff{Attempts: attempts, LastAt: t0.Add(last), NextAt: t0.Add(next), Instances: ids, Reason: "boom"}
	}
	fail := func(ids ...string) []failedInstance {
		var out []failedInstance
		for _, id := range ids {
			out = append(out, failedInstance{ID: id, Reason: "boom"})
		}
		return out
	}
	tests := []struct {
		name        string
		prev        *api.ReplaceBackoff
		failed      []failedInstance
		now         time.Duration
		want        *api.ReplaceBackoff
		wantReplace string
		wantWake    time.Duration // -1: none
	}{
		{name: "nothing failed, no record", now: 0, wantWake: -1},
		{
			name: "the first failure is replaced at once", failed: fail("a"), now: 0,
			want: rec(1, 0, 2*time.Second, "a"), wantReplace: "a", wantWake: -1,
		},
		{
			name: "a failure within the back-off waits", prev: rec(1, 0, 2*time.Second, "a"), failed: fail("b"), now: time.Second,
			want: rec(1, 0, 2*time.Second, "a"), wantWake: 2 * time.Second,
		},
		{
			name: "the back-off doubles", prev: rec(1, 0, 2*time.Second, "a"), failed: fail("b"), now: 3 * time.Second,
			want: rec(2, 3*time.Second, 7*time.Second, "b"), wantReplace: "b", wantWake: -1,
		},
		{
			name: "up to the cap", prev: rec(4, 0, 10*time.Second, "a"), failed: fail("b"), now: 10 * time.Second,
			want: rec(5, 10*time.Second, 20*time.Second, "b"), wantReplace: "b", wantWake: -1,
		},
		{
			name: "every instance failed at once goes in one attempt", failed: fail("a", "b"), now: 0,
			want: rec(1, 0, 2*time.Second, "a", "b"), wantReplace: "a b", wantWake: -1,
		},
		{
			name: "an instance counted already goes without counting again", prev: rec(3, 0, 8*time.Second, "a"), failed: fail("a"),
			now: time.Second, want: rec(3, 0, 8*time.Second, "a"), wantReplace: "a", wantWake: -1,
		},
		{
			name: "stable for the reset period starts again", prev: rec(5, 0, 10*time.Second, "a"), failed: fail("b"), now: time.Minute,
			want: rec(1, time.Minute, time.Minute+2*time.Second, "b"), wantReplace: "b", wantWake: -1,
		},
		{name: "a stable record is dropped", prev: rec(5, 0, 10*time.Second, "a"), now: time.Minute, wantWake: -1},
		{
			name: "an unstable record waits for the reset", prev: rec(5, 0, 10*time.Second, "a"), now: 30 * time.Second,
			want: rec(5, 0, 10*time.Second, "a"), wantWake: time.Minute,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, replace, wake := stepReplace(tc.prev, tc.failed, t0.Add(tc.now), pol)
			if !replaceEqual(next, tc.want) {
				t.Errorf("record %+v, want %+v", next, tc.want)
			}
			if got := strings.Join(replace, " "); got != tc.wantReplace {
				t.Errorf("replace %q, want %q", got, tc.wantReplace)
			}
			wantWake := time.Time{}
			if tc.wantWake >= 0 {
				wantWake = t0.Add(tc.wantWake)
			}
			if !wake.Equal(wantWake) {
				t.Errorf("wake %v, want %v", wake, wantWake)
			}
		})
	}
}

// TestPlanReplacesFailedInstances: a failed Service instance is deleted and
// its replacement placed on another node; a DaemonService's on its own node;
// a failed instance within the back-off stays. An instance that exited 0 for
// good (Succeeded: restart condition Never or MaxCount) goes the same way.
func TestPlanReplacesFailedInstances(t *testing.T) {
	t.Parallel()
	now := time.Unix(2_000_000, 0).UTC()
	nodes := []sched.Node{{Name: "n1", Ready: true}, {Name: "n2", Ready: true}}
	for _, tc := range []struct {
		name, typ    string
		phase        string // default Failed
		prev         *api.ReplaceBackoff
		wantPutNode  string
		wantDeleted  bool
		wantAttempts int
	}{
		{name: "service, first failure", typ: quadlet.TypeService, wantPutNode: "n2", wantDeleted: true, wantAttempts: 1},
		{name: "daemon service, first failure", typ: quadlet.TypeDaemonService, wantPutNode: "n1", wantDeleted: true, wantAttempts: 1},
		{name: "service, exited 0", typ: quadlet.TypeService, phase: api.InstanceSucceeded, wantPutNode: "n2", wantDeleted: true, wantAttempts: 1},
		{name: "daemon service, exited 0", typ: quadlet.TypeDaemonService, phase: api.InstanceSucceeded, wantPutNode: "n1", wantDeleted: true, wantAttempts: 1},
		{
			name: "service exited 0 within the back-off", typ: quadlet.TypeService, phase: api.InstanceSucceeded, wantAttempts: 3,
			prev: &api.ReplaceBackoff{Attempts: 3, LastAt: now.Add(-time.Second), NextAt: now.Add(7 * time.Second), Instances: []string{"gone"}},
		},
		{
			name: "service within the back-off", typ: quadlet.TypeService, wantAttempts: 3,
			prev: &api.ReplaceBackoff{Attempts: 3, LastAt: now.Add(-time.Second), NextAt: now.Add(7 * time.Second), Instances: []string{"gone"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := desiredSpec(t, "web", tc.typ, 1, "v1")
			w.Meta.Generation = 1
			a := assigned("web", w.Spec.TemplateHash, "x", 1)
			a.Type = tc.typ
			cur := []api.Assignment{a}
			if tc.typ == quadlet.TypeDaemonService {
				b := assigned("web", w.Spec.TemplateHash, "y", 1)
				b.Node, b.Type = "n2", tc.typ
				cur = append(cur, b)
			}
			n := 0
			plan := PlanAssignments(AssignInput{
				Nodes: nodes, Desired: []workload{w}, Current: cur, Now: now,
				Reported:  map[string]api.InstanceStatus{a.InstanceID: {InstanceID: a.InstanceID, Phase: cmp.Or(tc.phase, api.InstanceFailed), ExitCode: 3}},
				Rollouts:  map[string]api.Rollout{"ns1/web": {Generation: 1, Replace: tc.prev}},
				NewSuffix: func() string { n++; return fmt.Sprintf("s%d", n) },
			})
			var putNodes []string
			for _, p := range plan.Put {
				putNodes = append(putNodes, p.Node)
			}
			if got := strings.Join(putNodes, " "); got != tc.wantPutNode {
				t.Errorf("new instances on %q, want %q", got, tc.wantPutNode)
			}
			deleted := len(plan.Delete) == 1 && plan.Delete[0].InstanceID == a.InstanceID
			if deleted != tc.wantDeleted || len(plan.Replaced) != len(plan.Delete) {
				t.Errorf("deleted %v (replaced %v), want the failed instance deleted: %v", ids(plan.Delete), ids(plan.Replaced), tc.wantDeleted)
			}
			ro := plan.Rollouts["ns1/web"]
			if ro.Replace == nil || ro.Replace.Attempts != tc.wantAttempts {
				t.Errorf("back-off %+v, want %d attempts", ro.Replace, tc.wantAttempts)
			}
			if tc.prev != nil && !plan.Wake["ns1/web"].Equal(tc.prev.NextAt) {
				t.Errorf("wake %v, want the back-off's end %v", plan.Wake["ns1/web"], tc.prev.NextAt)
			}
		})
	}
}

// TestLeaderReplacesFailedInstances: on etcd, a Service instance reported
// Failed is replaced at once, the next failure waits out the back-off,
// which etcd keeps: a new term does not replace it any sooner. The status
// shows the attempts, the reason and the next try.
func TestLeaderReplacesFailedInstances(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	clk := &fakeClock{now: time.Unix(e.base, 0).UTC()}
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	cfg := Config{Now: clk.Now, NodeLossTimeout: time.Hour, Replace: ReplacePolicy{Base: time.Minute, Cap: time.Hour, Reset: 2 * time.Hour}}
	_, stop := e.run(cfg)
	polltest.Until(t, 10*time.Second, "the instance placed", func() bool { return len(e.assignments("web")) == 1 })
	first := e.assignments("web")[0]
	failed := func(a api.Assignment) api.InstanceStatus {
		r := running(a)
		r.Phase, r.State, r.ExitCode = api.InstanceFailed, "exited", 3
		return r
	}
	e.report(1, failed(first))
	var second api.Assignment
	polltest.Until(t, 10*time.Second, "the failed instance replaced at once", func() bool {
		as := e.assignments("web")
		if len(as) == 1 && as[0].InstanceID != first.InstanceID {
			second = as[0]
			return true
		}
		return false
	})
	ro, ok, err := e.repo.GetRollout(e.ctx, "ns1", "web")
	if err != nil || !ok || ro.Replace == nil || ro.Replace.Attempts != 1 {
		t.Fatalf("rollout record %+v (%v, %v), want one attempt recorded", ro.Replace, ok, err)
	}
	polltest.Until(t, 10*time.Second, "an InstanceReplaced event names the failed instance", func() bool {
		events, err := e.repo.ListEvents(e.ctx, 0)
		return err == nil && hasEvent(events, ReasonInstanceReplaced, first.InstanceID)
	})
	// The replacement fails too, within the back-off: it stays, and the
	// status says when it goes.
	e.report(2, failed(second))
	polltest.Until(t, 10*time.Second, "the status shows the back-off", func() bool {
		st := e.status("web")
		c := condition(st, ConditionReconciling)
		return st.NextRetryTime != nil && st.NextRetryTime.Equal(ro.Replace.NextAt) && st.Attempts == 1 &&
			strings.Contains(st.RetryReason, second.InstanceID) && c != nil && c.Reason == ReasonBackOff
	})
	polltest.Until(t, 10*time.Second, "an InstanceFailed event names the waiting instance", func() bool {
		events, err := e.repo.ListEvents(e.ctx, 0)
		return err == nil && hasEvent(events, ReasonInstanceFailed, second.InstanceID)
	})
	stop()
	// A new term, its clock just before the back-off ends: the failed
	// instance stays; at its end it goes.
	clk.set(ro.Replace.NextAt.Add(-time.Second))
	l, stop := e.run(cfg)
	defer stop()
	polltest.Until(t, 10*time.Second, "the new term settles", l.idle)
	if as := e.assignments("web"); len(as) != 1 || as[0].InstanceID != second.InstanceID {
		t.Fatalf("the new term replaced %s before the back-off ended: %v", second.InstanceID, ids(as))
	}
	clk.set(ro.Replace.NextAt)
	l.view.markAll(factTimers)
	polltest.Until(t, 10*time.Second, "the second failed instance replaced once the back-off ended", func() bool {
		as := e.assignments("web")
		return len(as) == 1 && as[0].InstanceID != second.InstanceID
	})
	polltest.Until(t, 10*time.Second, "two attempts recorded", func() bool {
		ro, _, _ := e.repo.GetRollout(e.ctx, "ns1", "web")
		return ro.Replace != nil && ro.Replace.Attempts == 2 && ro.Replace.NextAt.Equal(clk.Now().Add(2*time.Minute))
	})
}

func hasEvent(events []api.Event, reason, text string) bool {
	for _, ev := range events {
		if ev.Reason == reason && strings.Contains(ev.Message, text) {
			return true
		}
	}
	return false
}

// holdReplacement gives workload name's rollout record a back-off that
// ends at a fixed time far ahead, so an instance reported Failed stays: for
// tests of what a failed instance shows.
func (e *leaderEnv) holdReplacement(l *Leader, name string) {
	e.t.Helper()
	polltest.Until(e.t, 10*time.Second, name+"'s rollout recorded and the loops idle", func() bool {
		_, ok, _ := e.repo.GetRollout(e.ctx, "ns1", name)
		return ok && l.idle()
	})
	ro, _, err := e.repo.GetRollout(e.ctx, "ns1", name)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := e.repo.Store().Get(e.ctx, resources.MetaKey("ns1", name))
	if err != nil {
		e.t.Fatal(err)
	}
	now := time.Now().UTC()
	ro.Replace = &api.ReplaceBackoff{Attempts: 1, LastAt: now, NextAt: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := e.repo.WriteRollouts(e.ctx, []resources.RolloutWrite{{Namespace: "ns1", Name: name, Rollout: ro, MetaVersion: kv.Version}}); err != nil {
		e.t.Fatal(err)
	}
	polltest.Until(e.t, 10*time.Second, "the view holds the back-off", func() bool {
		ro, ok := l.view.rolloutOf("ns1/" + name)
		return ok && ro.Replace != nil
	})
}

// TestBuildFailureIsNotReplaced: an instance whose build failed (built from
// Git, failed with no container) waits for the next commit; one that ran
// and failed, or one of an image, is replaced.
func TestBuildFailureIsNotReplaced(t *testing.T) {
	built := api.Assignment{InstanceID: "web-1", Build: &api.BuildRef{Commit: "c3"}}
	image := api.Assignment{InstanceID: "web-2"}
	for _, tc := range []struct {
		a    api.Assignment
		r    api.InstanceStatus
		want bool
	}{
		{built, api.InstanceStatus{Phase: api.InstanceFailed}, true},
		{built, api.InstanceStatus{Phase: api.InstanceFailed, ContainerID: "abc"}, false},
		{image, api.InstanceStatus{Phase: api.InstanceFailed}, false},
	} {
		if got := buildFailed(tc.a, tc.r); got != tc.want {
			t.Errorf("buildFailed(%+v, %+v) = %v, want %v", tc.a, tc.r, got, tc.want)
		}
	}
}
