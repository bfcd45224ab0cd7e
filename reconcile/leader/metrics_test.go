package leader

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/metrics/metricstest"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// TestPassMetrics: the placement and status loops count their passes, a
// workload applied during the term is placed with a scheduling latency
// recorded, and the queue depth is exported. Not parallel: the loops'
// labels are shared by every leader of the package's tests, and the counts
// must move by this test's passes alone.
func TestPassMetrics(t *testing.T) {
	value := func(family string, labels map[string]string) float64 { return metricstest.Value(t, family, labels) }
	placement := map[string]string{"loop": "placement", "result": metrics.ResultSuccess}
	status := map[string]string{"loop": "status", "result": metrics.ResultSuccess}
	failed := map[string]string{"loop": "placement", "result": metrics.ResultFailure}
	latency := map[string]string{"loop": "placement"}
	passes, statusPasses, latencies := value("kat_reconcile_pass_duration_seconds", placement),
		value("kat_reconcile_pass_duration_seconds", status), value("kat_reconcile_latency_seconds", latency)
	failures := value("kat_reconcile_pass_duration_seconds", failed)
	scheduled := map[string]string{"result": metrics.ScheduleScheduled, "reason": ""}
	noMemory := map[string]string{"result": metrics.ScheduleUnschedulable, "reason": "insufficient_memory"}
	placed, unplaced := value("kat_scheduling_attempts_total", scheduled), value("kat_scheduling_attempts_total", noMemory)

	e := newLeaderEnv(t)
	_, stop := e.run(Config{})
	defer stop()
	// The term's first pass, over every workload, answers no change.
	polltest.Until(t, 10*time.Second, "the first placement pass", func() bool {
		return value("kat_reconcile_pass_duration_seconds", placement) > passes
	})
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 2, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "two instances of web placed", func() bool { return len(e.assignments("web")) == 2 })
	// Counted once the pass that wrote them ends.
	polltest.Until(t, 10*time.Second, "web's 2 instances counted scheduled", func() bool {
		return value("kat_scheduling_attempts_total", scheduled) >= placed+2
	})
	// An instance no node has the memory for is an unschedulable attempt,
	// by the reason that ruled the nodes out.
	big := workloadFiles(t, "big", quadlet.TypeService, 1, "v1")
	big["workload.kat"] = append(big["workload.kat"], "    resources: {requests: {memory: 4000Gi}}\n"...)
	e.apply(big, api.APIOwner())
	polltest.Until(t, 10*time.Second, "big's instance counted unschedulable for memory", func() bool {
		return value("kat_scheduling_attempts_total", noMemory) > unplaced
	})
	polltest.Until(t, 10*time.Second, "a scheduling latency recorded", func() bool {
		return value("kat_reconcile_latency_seconds", latency) > latencies
	})
	polltest.Until(t, 10*time.Second, "status passes counted", func() bool {
		return value("kat_reconcile_pass_duration_seconds", status) > statusPasses
	})
	if value("kat_reconcile_pass_duration_seconds", failed) != failures {
		t.Error("a placement pass failed")
	}
	// The gauge is set at each pass; once the loop is idle nothing waits.
	if n, err := testutil.GatherAndCount(metrics.Registry(), "kat_reconcile_queue_depth"); err != nil || n < 2 {
		t.Errorf("kat_reconcile_queue_depth has %d series (%v), want placement's and status's", n, err)
	}
	polltest.Until(t, 10*time.Second, "placement's queue empty", func() bool {
		return value("kat_reconcile_queue_depth", map[string]string{"loop": "placement"}) == 0
	})
}
