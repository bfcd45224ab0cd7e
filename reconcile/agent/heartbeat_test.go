package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestHeartbeatPostsReportsAndRetries: the heartbeat posts the instances and
// conditions, retries a failed post before the next tick, and beats when
// woken.
func TestHeartbeatPostsReportsAndRetries(t *testing.T) {
	t.Parallel()
	facts := &memoryFacts{statusErrs: []error{errors.New("leader not serving yet")}}
	wake := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunHeartbeat(ctx, HeartbeatConfig{
			Node: "n1", Facts: facts, Interval: time.Hour, Wake: wake,
			Resources:  func() (api.NodeResources, error) { return api.NodeResources{}, nil },
			GPUs:       func() []api.GPU { return nil },
			Instances:  func() []api.InstanceStatus { return []api.InstanceStatus{{InstanceID: "i1"}} },
			Conditions: func() []api.Condition { return []api.Condition{{Type: "RuntimeReady"}} },
		})
	}()
	count := func() int { return len(facts.statuses()) }
	polltest.Until(t, 10*time.Second, "the retried beat", func() bool { return count() == 1 })
	wake <- struct{}{}
	polltest.Until(t, 10*time.Second, "the woken beat", func() bool { return count() == 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := facts.statuses()[0]; st.NodeName != "n1" || len(st.WorkloadInstances) != 1 || len(st.Conditions) != 1 || st.Timestamp == 0 {
		t.Fatalf("posted %+v", st)
	}
}
