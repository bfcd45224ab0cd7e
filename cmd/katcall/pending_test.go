package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestPendingShown: katcall get workloads shows instances no node could
// take beside ready/desired, and katcall status names the Scheduled
// condition.
func TestPendingShown(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := api.Workload{WorkloadMeta: api.WorkloadMeta{Namespace: "ns1", Name: "big", Type: "Service", Generation: 1, CreatedAt: now}, Status: api.WorkloadStatus{
		Phase: "Progressing", Desired: 3, Ready: 1, Unplaced: 2, UnplacedReason: "3 nodes: 3 insufficient memory",
		Conditions: []api.Condition{{Type: "Scheduled", Status: api.ConditionFalse, Reason: "Unschedulable"}},
	}}
	var out bytes.Buffer
	if err := workloadTable(&globals{stdout: &out}, []api.Workload{w}, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1/3 (2 pending)") {
		t.Errorf("get workloads:\n%s\nlacks 1/3 (2 pending)", out.String())
	}
	if got := conditionsLabel(w.Status.Conditions); got != "Scheduled:Unschedulable" {
		t.Errorf("conditions = %q, want Scheduled:Unschedulable", got)
	}
}

// TestBackOffShown: katcall status tells when a failed instance is replaced
// next and why, and how many were replaced in a row.
func TestBackOffShown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	last, next := now.Add(-time.Second), now.Add(7*time.Second)
	got := reconcileLines(api.WorkloadStatus{Attempts: 2, LastReconcileTime: &last, NextRetryTime: &next,
		RetryReason: "instance web-1-a: exit code 3"}, now)
	for _, want := range []string{"2 failed instances replaced in a row", "(in 7s): instance web-1-a: exit code 3",
		next.Local().Format(time.RFC3339)} {
		if !strings.Contains(got, want) {
			t.Errorf("status lines\n%s\nlack %q", got, want)
		}
	}
	if got := reconcileLines(api.WorkloadStatus{}, now); got != "" {
		t.Errorf("a workload never reconciled shows %q, want nothing", got)
	}
}
