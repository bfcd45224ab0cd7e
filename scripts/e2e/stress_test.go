package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// sleeper is a Service of replicas sleeping containers.
func sleeper(name string, replicas int) map[string]string {
	return map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: default}
spec:
  type: Service
  replicas: %d
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "100000"]
    stopGracePeriodSeconds: 1
`, name, replicas)}
}

// TestStressConcurrentCreates: with the agent's default concurrency, 100
// containers of four workloads applied at once (each workload in its own
// uid map) all come up, and all go again when the workloads are deleted:
// the concurrency the agent enables does not deadlock Podman 4.3. A
// deadlock shows as the generous deadline passing, not as a slow run.
func TestStressConcurrentCreates(t *testing.T) {
	requirePodman(t)
	c := StartTestCluster(t)
	const workloads, replicas = 4, 25
	var names []string
	var wg sync.WaitGroup
	for i := range workloads {
		name := fmt.Sprintf("stress-%s-%d", randomHex(2), i)
		names = append(names, name)
		dir := writeWorkload(t, sleeper(name, replicas))
		wg.Go(func() { mustApplyTB(t, c, dir) })
	}
	wg.Wait()
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	for _, name := range names {
		d := waitStatusUntil(t, c, "default/"+name, fmt.Sprintf("%d running", replicas), deadline, func(d *api.WorkloadDetail) bool {
			running := 0
			for _, in := range d.Instances {
				if in.Status.State == "running" {
					running++
				}
			}
			return running == replicas && d.Status.Ready == replicas
		})
		if len(d.Instances) != replicas {
			t.Errorf("%s: %d instances, want %d", name, len(d.Instances), replicas)
		}
	}
	ids := 0
	for _, name := range names {
		ids += len(containerIDs(t, c.Node, name))
	}
	if ids != workloads*replicas {
		t.Fatalf("podman lists %d containers of the workloads, want %d", ids, workloads*replicas)
	}
	up := time.Since(start)
	start = time.Now()
	for _, name := range names {
		wg.Go(func() {
			if r := c.Katcall(t.Context(), "delete", "workload", "default/"+name); r.Code != 0 {
				t.Errorf("delete %s: %s", name, r)
			}
		})
	}
	wg.Wait()
	for _, name := range names {
		waitContainersGone(t, c.Node, name, deadline)
	}
	t.Logf("%d containers running %s after the apply, all removed %s after the delete", workloads*replicas,
		up.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// waitContainersGone waits until Podman lists no container of the workload.
func waitContainersGone(t *testing.T, node, name string, deadline time.Time) {
	t.Helper()
	polltest.Until(t, time.Until(deadline), name+": every container removed", func() bool { return len(containerIDs(t, node, name)) == 0 })
}
