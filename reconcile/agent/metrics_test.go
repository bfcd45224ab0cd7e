package agent

import (
	"fmt"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
)

// TestInstancesByPhaseGauge: the agent sets kat_instances from its own view
// of its node's instances, every phase present. Not parallel: every agent
// of this package's tests is node n1, and only this one may run meanwhile.
func TestInstancesByPhaseGauge(t *testing.T) {
	e := newAgentEnv(t)
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	e.assign("bad-1", quadlet.RestartMaxCount, "exit 1", false)
	passes, err := metrics.Value("kat_reconcile_pass_duration_seconds", map[string]string{"loop": "agent"})
	if err != nil {
		t.Fatal(err)
	}
	ag, _ := e.start()
	e.waitFor("web-1 running, bad-1 failed", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning && m["bad-1"].Phase == api.InstanceFailed
	})
	want := map[string]float64{api.InstanceRunning: 1, api.InstanceFailed: 1,
		api.InstancePending: 0, api.InstanceSucceeded: 0}
	polltest.UntilErr(t, 10*time.Second, "kat_instances of n1", func() error {
		for phase, n := range want {
			v, err := metrics.Value("kat_instances", map[string]string{"node": "n1", "phase": phase})
			if err != nil {
				return err
			}
			if v != n {
				return fmt.Errorf("kat_instances{phase=%q} = %v, want %v", phase, v, n)
			}
		}
		return nil
	})
	if v, _ := metrics.Value("kat_reconcile_pass_duration_seconds", map[string]string{"loop": "agent"}); v <= passes {
		t.Errorf("agent passes %v, before %v: want more", v, passes)
	}
}

func TestInstancesByPhase(t *testing.T) {
	t.Parallel()
	got := instancesByPhase([]api.InstanceStatus{
		{Phase: api.InstanceRunning}, {Phase: api.InstanceRunning}, {Phase: api.InstancePending},
	})
	want := map[string]int{api.InstanceRunning: 2, api.InstancePending: 1,
		api.InstanceSucceeded: 0, api.InstanceFailed: 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("instancesByPhase = %v, want %v", got, want)
	}
}
