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
