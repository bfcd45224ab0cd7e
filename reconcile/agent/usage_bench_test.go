package agent

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// BenchmarkUsageSample50Containers measures the agent's CPU for one usage
// sample of the node and 50 running containers (real Podman containers):
// CPU time per sample, and that as a share of one core when the agent
// samples once per default heartbeat interval (agentTickSeconds, 15 s).
func BenchmarkUsageSample50Containers(b *testing.B) {
	pm, ids := podmanForAgentTest(b)
	mark := randomHex(b)
	const testLabel = "kat.test"
	b.Cleanup(func() { removeMarked(b, pm, testLabel, mark) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, ok := ids.Map(int(ids.Slots()/3) + 4) // apart from the other agent tests' slots
	if !ok {
		b.Fatal("no id map slot")
	}
	var g errgroup.Group
	g.SetLimit(4)
	for i := range 50 {
		g.Go(func() error {
			name := fmt.Sprintf("kat-agent-bench-%s-%02d", mark, i)
			_, err := pm.RunContainer(ctx, runtime.ContainerSpec{Name: name, Image: baseImage, Args: []string{"sleep", "600"}, IDMap: m,
				Labels: map[string]string{testLabel: mark, runtime.LabelInstance: name, runtime.LabelNamespace: "bench", runtime.LabelWorkload: "sleep"}})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	containers, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark})
	if err != nil {
		b.Fatal(err)
	}
	s := NewUsageSampler()
	if u, err := s.Sample(containers); err != nil || len(u.Containers) != 50 {
		b.Fatalf("sample of %d containers: %v, want 50 sampled", len(containers), err)
	}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start, n := cpu(), 0
	for b.Loop() {
		if _, err := s.Sample(containers); err != nil {
			b.Fatal(err)
		}
		n++
	}
	perSample := (cpu() - start) / time.Duration(n)
	b.ReportMetric(float64(perSample.Microseconds())/1000, "cpu-ms/sample")
	b.ReportMetric(100*perSample.Seconds()/float64(quadlet.DefaultAgentTickSeconds), "%-core@15s")
}
