package leader

import (
	"fmt"
	"testing"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

func TestDeriveWorkloadStatus(t *testing.T) {
	const h1, h2 = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	now := time.Unix(1000, 0)
	meta := resources.WorkloadMeta{Namespace: "ns1", Name: "web", Type: quadlet.TypeService, Generation: 2, SpecHash: h2}
	a1, a2, old := assigned("web", h2, "a", 1), assigned("web", h2, "b", 2), assigned("web", h1, "o", 0)
	running := func(a resources.Assignment, health string) resources.InstanceStatus {
		return resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstanceRunning, HealthStatus: health}
	}
	failed := func(a resources.Assignment) resources.InstanceStatus {
		return resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstanceFailed, ExitCode: 1, Restarts: 2}
	}
	tests := []struct {
		name      string
		meta      resources.WorkloadMeta
		desired   int
		assigned  []resources.Assignment
		reported  []resources.InstanceStatus
		prevPhase string
		phase     string
		ready     int
		observed  int64
		lastError string
	}{
		{name: "nothing assigned yet is pending", meta: meta, desired: 2, phase: resources.PhasePending},
		{name: "assigned but not reported is pending", meta: meta, desired: 2, assigned: []resources.Assignment{a1, a2},
			phase: resources.PhasePending, observed: 2},
		{name: "one of two ready is progressing", meta: meta, desired: 2, assigned: []resources.Assignment{a1, a2},
			reported: []resources.InstanceStatus{running(a1, resources.HealthHealthy), running(a2, resources.HealthPending)},
			phase:    resources.PhaseProgressing, ready: 1, observed: 2},
		{name: "all ready is ready", meta: meta, desired: 2, assigned: []resources.Assignment{a1, a2},
			reported: []resources.InstanceStatus{running(a1, resources.HealthHealthy), running(a2, resources.HealthNotApplicable)},
			phase:    resources.PhaseReady, ready: 2, observed: 2},
		{name: "losing one after ready is degraded", meta: meta, desired: 2, assigned: []resources.Assignment{a1, a2}, prevPhase: resources.PhaseReady,
			reported: []resources.InstanceStatus{running(a1, resources.HealthHealthy), running(a2, resources.HealthUnhealthy)},
			phase:    resources.PhaseDegraded, ready: 1, observed: 2},
		{name: "all failed is failed", meta: meta, desired: 1, assigned: []resources.Assignment{a1},
			reported: []resources.InstanceStatus{failed(a1)}, phase: resources.PhaseFailed, observed: 2,
			lastError: "instance web-bbbbbbbb-a failed: exit code 1 after 2 restarts"},
		{name: "old instance still assigned is progressing", meta: meta, desired: 1, assigned: []resources.Assignment{old, a1},
			reported: []resources.InstanceStatus{running(old, resources.HealthHealthy)}, phase: resources.PhaseProgressing},
		{name: "succeeded job is ready", meta: resources.WorkloadMeta{Name: "j", Type: quadlet.TypeJob, Generation: 1, SpecHash: h2},
			desired: 1, assigned: []resources.Assignment{a1},
			reported: []resources.InstanceStatus{{InstanceID: a1.InstanceID, Phase: resources.InstanceSucceeded}},
			phase:    resources.PhaseReady, observed: 1},
		{name: "zero replicas with nothing left is ready", meta: meta, desired: 0, phase: resources.PhaseReady, observed: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := map[string]resources.InstanceStatus{}
			for _, r := range tc.reported {
				rep[r.InstanceID] = r
			}
			got := DeriveWorkloadStatus(StatusInput{Meta: tc.meta, TemplateHash: h2, Desired: tc.desired, Assigned: tc.assigned, Reported: rep,
				Prev: resources.WorkloadStatus{Phase: tc.prevPhase}}, now)
			if got.Phase != tc.phase || got.Ready != tc.ready || got.Desired != tc.desired || got.ObservedGeneration != tc.observed || got.LastError != tc.lastError {
				t.Fatalf("got phase %s ready %d/%d observed %d lastError %q; want %s %d/%d %d %q",
					got.Phase, got.Ready, got.Desired, got.ObservedGeneration, got.LastError, tc.phase, tc.ready, tc.desired, tc.observed, tc.lastError)
			}
			if len(got.Conditions) == 0 || got.Conditions[0].Type != "Ready" {
				t.Fatalf("no Ready condition: %+v", got.Conditions)
			}
			again := DeriveWorkloadStatus(StatusInput{Meta: tc.meta, TemplateHash: h2, Desired: tc.desired, Assigned: tc.assigned, Reported: rep, Prev: got}, now.Add(time.Minute))
			if !statusEqual(again, got) || !again.UpdatedAt.Equal(got.UpdatedAt) {
				t.Fatalf("deriving again from the result changed it:\n%+v\n%+v", got, again)
			}
		})
	}
}

func TestDeriveWorkloadStatusKeepsOthersConditions(t *testing.T) {
	const h = "bbbbbbbbbbbb"
	t0, now := time.Unix(500, 0), time.Unix(1000, 0)
	meta := resources.WorkloadMeta{Namespace: "ns1", Name: "web", Type: quadlet.TypeService, Generation: 2, SpecHash: h}
	a := assigned("web", h, "a", 1)
	invalid := resources.Condition{Type: "Stalled", Status: resources.ConditionTrue, Reason: "InvalidQuadlet", Message: "workload.kat: bad", LastTransitionTime: t0}
	buildFailed := resources.Condition{Type: "BuildFailed", Status: resources.ConditionTrue, Reason: "BuildFailed", Message: "tail", LastTransitionTime: t0}
	ownStalled := resources.Condition{Type: "Stalled", Status: resources.ConditionTrue, Reason: "InstanceFailed", Message: "old", LastTransitionTime: t0}
	ownReconciling := resources.Condition{Type: "Reconciling", Status: resources.ConditionTrue, Reason: "Progressing", LastTransitionTime: t0}
	tests := []struct {
		name     string
		prev     []resources.Condition
		reported resources.InstanceStatus
		want     []string // type/reason in order
	}{
		{name: "gitsync's Stalled survives a ready workload", prev: []resources.Condition{invalid},
			reported: resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstanceRunning, HealthStatus: resources.HealthNotApplicable},
			want:     []string{"Ready/Ready", "Stalled/InvalidQuadlet"}},
		{name: "BuildFailed survives, own stale conditions go", prev: []resources.Condition{ownReconciling, buildFailed, ownStalled},
			reported: resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstanceRunning, HealthStatus: resources.HealthNotApplicable},
			want:     []string{"Ready/Ready", "BuildFailed/BuildFailed"}},
		{name: "own Stalled comes after gitsync's", prev: []resources.Condition{invalid},
			reported: resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstanceFailed, Message: "boom"},
			want:     []string{"Ready/Failed", "Stalled/InvalidQuadlet", "Stalled/InstanceFailed"}},
		{name: "nothing foreign", reported: resources.InstanceStatus{InstanceID: a.InstanceID, Phase: resources.InstancePending},
			want: []string{"Ready/Pending"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := StatusInput{Meta: meta, TemplateHash: h, Desired: 1, Assigned: []resources.Assignment{a},
				Reported: map[string]resources.InstanceStatus{a.InstanceID: tc.reported}, Prev: resources.WorkloadStatus{Conditions: tc.prev}}
			got := DeriveWorkloadStatus(in, now)
			var types []string
			for _, c := range got.Conditions {
				types = append(types, c.Type+"/"+c.Reason)
				if !ownedCondition(c) && !c.LastTransitionTime.Equal(t0) {
					t.Errorf("foreign condition %s changed its transition time", c.Type)
				}
			}
			if fmt.Sprint(types) != fmt.Sprint(tc.want) {
				t.Fatalf("conditions = %v, want %v", types, tc.want)
			}
			// A second pass over its own result writes nothing: no flapping
			// against the other writer.
			in.Prev = got
			if again := DeriveWorkloadStatus(in, now.Add(time.Minute)); !statusEqual(again, got) {
				t.Fatalf("second pass changed the status:\n%+v\n%+v", got, again)
			}
		})
	}
}
