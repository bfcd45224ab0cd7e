package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics/metricstest"
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

// TestHeartbeatSendsUsage: a beat carries a usage sample and publishes it
// as the node's metrics, its workloads' containers summed; a beat woken
// within minUsageGap of the sample resends it without sampling again; a
// failed sample leaves the beat without usage, not without a beat.
func TestHeartbeatSendsUsage(t *testing.T) {
	t.Parallel()
	facts := &memoryFacts{}
	wake := make(chan struct{}, 1)
	var mu sync.Mutex
	clock := time.Unix(1_800_000_000, 0)
	samples := 0
	sample := func() (*api.NodeUsage, error) {
		mu.Lock()
		defer mu.Unlock()
		samples++
		if samples == 2 {
			return nil, errors.New("/proc/stat: gone")
		}
		c := func(inst string, cpu int64) api.ContainerUsage {
			return api.ContainerUsage{Namespace: "shop", Workload: "web", InstanceID: inst,
				ResourceUsage: api.ResourceUsage{CPUMillis: cpu, MemoryBytes: 1 << 20, NetworkRxBytes: 10}}
		}
		return &api.NodeUsage{SampledAt: int64(samples), ResourceUsage: api.ResourceUsage{CPUMillis: 500 + int64(samples), MemoryBytes: 1 << 30},
			Containers: []api.ContainerUsage{c("web-1", 100), c("web-2", 50)}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunHeartbeat(ctx, HeartbeatConfig{
			Node: "usage-node", Facts: facts, Interval: time.Hour, Wake: wake, Usage: sample,
			Resources: func() (api.NodeResources, error) { return api.NodeResources{}, nil },
			GPUs:      func() []api.GPU { return nil },
			Now:       func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		})
	}()
	count := func() int { return len(facts.statuses()) }
	beats := []string{"the first beat", "a beat woken at once", "a beat woken later", "a beat woken later still"}
	for i, what := range beats {
		if i > 0 {
			if i > 1 {
				mu.Lock()
				clock = clock.Add(minUsageGap)
				mu.Unlock()
			}
			wake <- struct{}{}
		}
		polltest.Until(t, 10*time.Second, what, func() bool { return count() == i+1 })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sts := facts.statuses()
	cpu := func(u *api.NodeUsage) int64 {
		if u == nil {
			return -1
		}
		return u.CPUMillis
	}
	if got := []int64{cpu(sts[0].Usage), cpu(sts[1].Usage), cpu(sts[2].Usage), cpu(sts[3].Usage)}; !slices.Equal(got, []int64{501, 501, -1, 503}) {
		t.Fatalf("the beats' CPU usage %v, want the first sample twice, none (failed), the third sample", got)
	}
	for family, want := range map[string]float64{"kat_node_cpu_usage_millicores": 503, "kat_node_memory_usage_bytes": 1 << 30} {
		if got := metricstest.Value(t, family, map[string]string{"node": "usage-node"}); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
	web := map[string]string{"node": "usage-node", "namespace": "shop", "workload": "web"}
	for family, want := range map[string]float64{"kat_workload_cpu_usage_millicores": 150, "kat_workload_memory_usage_bytes": 2 << 20,
		"kat_workload_network_receive_bytes_total": 20} {
		if got := metricstest.Value(t, family, web); got != want {
			t.Errorf("%s = %v, want %v", family, got, want)
		}
	}
}

// TestHeartbeatWaitsForReady: no beat goes before Ready (the agent has read
// back the restart counts of the status the node reported last, which a
// beat replaces); the first goes at once after.
func TestHeartbeatWaitsForReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		facts := &memoryFacts{}
		ready := make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			done <- RunHeartbeat(ctx, HeartbeatConfig{
				Node: "n1", Facts: facts, Interval: time.Hour, Ready: ready,
				Resources: func() (api.NodeResources, error) { return api.NodeResources{}, nil },
				GPUs:      func() []api.GPU { return nil },
				Instances: func() []api.InstanceStatus { return []api.InstanceStatus{{InstanceID: "i1", Restarts: 1}} },
			})
		}()
		synctest.Wait() // the heartbeat is blocked: on Ready, or after a beat
		if n := len(facts.statuses()); n != 0 {
			t.Fatalf("%d beats before Ready", n)
		}
		close(ready)
		synctest.Wait()
		if sts := facts.statuses(); len(sts) != 1 || len(sts[0].WorkloadInstances) != 1 || sts[0].WorkloadInstances[0].Restarts != 1 {
			t.Fatalf("beats after Ready: %+v, want one with the instance", sts)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
