package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	kruntime "kat.dws.rip/kat/runtime"
)

// BenchmarkApplyToRunning measures an image workload from `katcall apply`
// to its instance running, against `podman run -d` of the same image with the
// same uid map, side by side in each iteration, on a node with cluster.kat's
// defaults. It reports both, and KAT's time over podman's.
func BenchmarkApplyToRunning(b *testing.B) {
	requirePodman(b)
	c, err := NewCluster(sharedBinaries(b), b.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "defaults-cluster.kat"))
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Stop(30 * time.Second)
		if err := RemoveNodeContainers(c.Node); err != nil {
			b.Errorf("clean up: %v", err)
		}
	})
	ids, err := kruntime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	if err != nil {
		b.Fatal(err)
	}
	var kat, floor time.Duration
	n := 0
	for b.Loop() {
		n++
		name := fmt.Sprintf("apply-%s-%d", randomHex(2), n)
		dir := writeWorkload(b, sleeper(name, 1))
		start := time.Now()
		mustApplyTB(b, c, dir)
		waitFast(b, c, "default/"+name, func(d *api.WorkloadDetail) bool {
			return len(d.Instances) == 1 && d.Instances[0].Status.State == "running"
		})
		took := time.Since(start)
		kat += took

		// The floor: the same container by hand, with a uid map of its
		// own (a slot clear of the agent's), as the agent gives each
		// new workload one.
		m, _ := ids.Map(100 + n)
		idmap := fmt.Sprintf("0:%d:%d", m.HostBase, kruntime.IDMapSize)
		label := "kat-bench=" + randomHex(4)
		start = time.Now()
		if out, err := exec.Command("podman", "run", "-d", "--uidmap", idmap, "--gidmap", idmap, "--label", label,
			"localhost/kat-base:latest", "/bin/sleep", "100000").CombinedOutput(); err != nil {
			b.Fatalf("podman run: %v\n%s", err, out)
		}
		byHand := time.Since(start)
		floor += byHand
		removeLabelled(b, label)
		fmt.Fprintf(os.Stderr, "apply %d: katcall apply to running %d ms, podman run -d %d ms\n", n, took.Milliseconds(), byHand.Milliseconds())
	}
	ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(n) }
	b.ReportMetric(ms(kat), "ms/apply-to-running")
	b.ReportMetric(ms(floor), "ms/podman-run")
	b.ReportMetric(ms(kat)-ms(floor), "ms/over-podman-run")
	fmt.Fprintf(os.Stderr, "image workload, mean of %d: katcall apply to running %.0f ms, podman run -d %.0f ms (+%.0f ms)\n", n, ms(kat), ms(floor), ms(kat)-ms(floor))
}
