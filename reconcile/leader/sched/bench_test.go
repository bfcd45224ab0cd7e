package sched

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

// benchCluster returns 1,000 nodes of three sizes in three zones, a tenth
// of them with a PreferNoSchedule taint and a twentieth dedicated to GPU
// work, and 100 workloads of 100 replicas with mixed requests: every fifth
// with a nodeSelector, one (without) asking for GPUs.
func benchCluster() ([]Node, []Request) {
	rng := rand.New(rand.NewPCG(7, 7))
	sizes := []struct{ cpu, mem int64 }{{4000, 8 * gi}, {8000, 16 * gi}, {16000, 32 * gi}}
	nodes := make([]Node, 1000)
	for i := range nodes {
		s := sizes[i%len(sizes)]
		n := Node{
			Name: fmt.Sprintf("node-%04d", i), Ready: true, CPU: s.cpu, Memory: s.mem,
			Labels: map[string]string{"zone": string(rune('a' + i%3))},
		}
		switch {
		case i%20 == 0:
			n.Taints = []Taint{{Key: "dedicated", Value: "gpu", Effect: NoSchedule}}
			n.GPUs = []GPU{{Index: 0, Driver: "nvidia", VRAMMiB: 24000}, {Index: 1, Driver: "nvidia", VRAMMiB: 24000}}
		case i%10 == 0:
			n.Taints = []Taint{{Key: "slow", Effect: PreferNoSchedule}}
		}
		nodes[i] = n
	}
	reqs := make([]Request, 100)
	for i := range reqs {
		r := Request{
			Key: fmt.Sprintf("default/w%03d", i), Type: quadlet.TypeService, Count: 100,
			CPU: 100 + 100*rng.Int64N(10), Memory: 64 * mi * (1 + rng.Int64N(32)),
		}
		if i%5 == 0 {
			r.NodeSelector = map[string]string{"zone": string(rune('a' + i%3))}
		}
		if i == 51 {
			r.GPU = &quadlet.GPU{Driver: "nvidia", MinVRAMMB: 16000}
			r.Tolerations = []quadlet.Toleration{{Key: "dedicated", Operator: "Equal", Value: "gpu", Effect: NoSchedule}}
		}
		reqs[i] = r
	}
	return nodes, reqs
}

// BenchmarkPlace10kOn1k places 100 workloads of 100 replicas on 1,000 nodes,
// one workload at a time as the leader does: Place, then Apply.
func BenchmarkPlace10kOn1k(b *testing.B) {
	proto, reqs := benchCluster()
	placements := 0
	b.ReportAllocs()
	for b.Loop() {
		nodes := slices.Clone(proto)
		for i := range nodes {
			nodes[i].GPUs = slices.Clone(nodes[i].GPUs)
		}
		rng := rand.New(rand.NewPCG(1, 1))
		for _, r := range reqs {
			res := Place(nodes, r, rng)
			Apply(nodes, r, res.Placements)
			placements += len(res.Placements)
		}
	}
	b.ReportMetric(float64(placements)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(placements)/float64(b.N), "placements/op")
}
