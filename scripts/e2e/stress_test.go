package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
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
		// Containers that end on SIGTERM: a removal waits for the stop,
		// not for the grace period a sleep as PID 1 (which ignores
		// SIGTERM) makes every removal wait out.
		files := sleeper(name, replicas)
		files["workload.kat"] = strings.Replace(files["workload.kat"], `command: ["/bin/sleep", "100000"]`,
			`command: ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 100000 & wait"]`, 1)
		if !strings.Contains(files["workload.kat"], "trap") {
			t.Fatalf("no command to replace in %s", files["workload.kat"])
		}
		dir := writeWorkload(t, files)
		wg.Go(func() { mustApplyTB(t, c, dir) })
	}
	wg.Wait()
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	// Looked at once a second, through the API in this process and one
	// podman ps for all four workloads: a katcall or podman process per
	// workload four times a second took CPU from the agent being tested.
	client := clientFor(t, c)
	polltest.UntilEvery(t, time.Until(deadline), time.Second, fmt.Sprintf("%d running instances of each workload", replicas), func() bool {
		for _, name := range names {
			d, err := client.WorkloadStatus(t.Context(), "default", name)
			if err != nil || !allRunning(d, replicas) {
				return false
			}
		}
		return true
	})
	if got := nodeContainers(t, c.Node, names); got != workloads*replicas {
		t.Fatalf("podman lists %d containers of the workloads, want %d", got, workloads*replicas)
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
	polltest.UntilEvery(t, time.Until(deadline), time.Second, "every container of the workloads removed", func() bool {
		return nodeContainers(t, c.Node, names) == 0
	})
	t.Logf("%d containers running %s after the apply, all removed %s after the delete", workloads*replicas,
		up.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// allRunning reports whether d has n instances, each with a running
// container, and n ready.
func allRunning(d *api.WorkloadDetail, n int) bool {
	running := 0
	for _, in := range d.Instances {
		if in.Status.State == "running" {
			running++
		}
	}
	return len(d.Instances) == n && running == n && d.Status.Ready == n
}

// nodeContainers counts the containers of node that belong to one of the
// workloads, with one podman ps.
func nodeContainers(t testing.TB, node string, workloads []string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", "ps", "-a", "--format", `{{index .Labels "kat.workload"}}`,
		"--filter", "label=kat.node="+node).Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	n := 0
	for _, w := range strings.Fields(string(out)) {
		if slices.Contains(workloads, w) {
			n++
		}
	}
	return n
}
