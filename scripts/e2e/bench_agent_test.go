package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	kruntime "kat.dws.rip/kat/runtime"
)

// BenchmarkAgentStart50 brings a Service of 50 replicas to running through a
// real kat-agent and real Podman, and compares the time with 50 sequential
// `podman run -d` of the same image with the same uid map. It reports both
// durations, their ratio and the agent's RSS with 50 containers. The
// Service is applied once the node has made its container network, as a
// node does once in the first seconds after it starts: the figure is a
// deploy to a running node, not the node's start-up.
func BenchmarkAgentStart50(b *testing.B) {
	requirePodman(b)
	const n = 50
	for b.Loop() {
		c, err := NewCluster(sharedBinaries(b), b.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "defaults-cluster.kat"))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if c.Running() {
				_ = c.Stop(30 * time.Second)
			}
			if err := RemoveNodeContainers(c.Node); err != nil {
				b.Errorf("clean up: %v", err)
			}
		})
		waitNodeNetwork(b, c.Node)
		name := "bench-" + randomHex(3)
		dir := writeWorkload(b, map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: default}
spec:
  type: Service
  replicas: %d
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "100000"]
`, name, n)})
		cpu0, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		mustApplyTB(b, c, dir)
		// Polled through the API in process (a katcall process a poll
		// would take CPU from the containers being measured), every 100ms:
		// 0.4% of the figure, and a tenth of the leader's CPU polls every
		// 20ms take.
		waitEvery(b, c, "default/"+name, 100*time.Millisecond, func(d *api.WorkloadDetail) bool {
			running := 0
			for _, in := range d.Instances {
				if in.Status.State == "running" {
					running++
				}
			}
			return running == n
		})
		agentDur := time.Since(start)
		cpu1, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		rss, err := RSS(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Stop(30 * time.Second); err != nil {
			b.Fatal(err)
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			b.Fatal(err)
		}

		// The floor: the same containers by hand, with the uid map the
		// agent gives the workload (slot 0 of the containers range, the
		// lowest free one).
		ids, err := kruntime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
		if err != nil {
			b.Fatal(err)
		}
		m, _ := ids.Map(0)
		idmap := fmt.Sprintf("0:%d:%d", m.HostBase, kruntime.IDMapSize)
		label := "kat-bench=" + randomHex(4)
		b.Cleanup(func() { removeLabelled(b, label) })
		start = time.Now()
		for i := range n {
			out, err := exec.Command("podman", "run", "-d", "--uidmap", idmap, "--gidmap", idmap, "--label", label,
				"--name", fmt.Sprintf("katbench-%s-%d", strings.TrimPrefix(label, "kat-bench="), i),
				"localhost/kat-base:latest", "/bin/sleep", "100000").CombinedOutput()
			if err != nil {
				b.Fatalf("podman run: %v\n%s", err, out)
			}
		}
		podmanDur := time.Since(start)
		removeLabelled(b, label)

		b.ReportMetric(agentDur.Seconds(), "agent-50-s")
		b.ReportMetric(podmanDur.Seconds(), "podman-run-50-s")
		b.ReportMetric(agentDur.Seconds()/podmanDur.Seconds(), "ratio")
		b.ReportMetric(float64(rss)/(1<<20), "agent-rss-MiB")
		b.ReportMetric(ticksToMs(cpu1-cpu0), "agent-cpu-ms")
		fmt.Fprintf(os.Stderr, "50 instances: kat-agent %s, 50 sequential podman run -d %s, ratio %.2f; kat-agent RSS with 50 containers %.1f MiB, its own CPU (podman's not counted) %.0f ms\n",
			agentDur.Round(time.Millisecond), podmanDur.Round(time.Millisecond), agentDur.Seconds()/podmanDur.Seconds(), float64(rss)/(1<<20), ticksToMs(cpu1-cpu0))
	}
}

// waitNodeNetwork waits (a minute at most) until node's agent has made its
// Podman network.
func waitNodeNetwork(tb testing.TB, node string) {
	tb.Helper()
	polltest.UntilEvery(tb, time.Minute, 50*time.Millisecond, "the network of "+node, func() bool {
		return exec.Command("podman", "network", "exists", NetworkName(node)).Run() == nil
	})
}

func mustApplyTB(tb testing.TB, c *Cluster, path string) {
	tb.Helper()
	if r := c.Katcall(context.Background(), "apply", "-f", path); r.Code != 0 {
		tb.Fatalf("katcall apply -f %s: %s", path, r)
	}
}

func removeLabelled(tb testing.TB, label string) {
	tb.Helper()
	if err := removeByFilter(nil, "label="+label); err != nil {
		tb.Error(err)
	}
}
