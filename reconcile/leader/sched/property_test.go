package sched

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

// rounds is how many random clusters each property is checked on.
const rounds = 400

// randomNode returns a node of one of a few sizes, with random labels,
// taints, GPUs and usage, sometimes already over-committed.
func randomNode(rng *rand.Rand, name string) Node {
	sizes := []struct{ cpu, mem int64 }{{1000, gi}, {2000, 4 * gi}, {4000, 8 * gi}, {16000, 64 * gi}, {0, 0}}
	s := sizes[rng.IntN(len(sizes))]
	n := Node{
		Name: name, Ready: rng.IntN(10) > 0, Cordoned: rng.IntN(10) == 0, CPU: s.cpu, Memory: s.mem,
		Labels: map[string]string{"zone": string(rune('a' + rng.IntN(3)))},
		Used: Usage{
			CPU: rng.Int64N(s.cpu + s.cpu/4 + 1), Memory: rng.Int64N(s.mem + s.mem/4 + 1),
			Instances: map[string]int{"default/web": rng.IntN(3), "default/db": rng.IntN(2)},
		},
	}
	for range rng.IntN(3) {
		effect := []string{NoSchedule, PreferNoSchedule}[rng.IntN(2)]
		n.Taints = append(n.Taints, Taint{Key: []string{"dedicated", "slow"}[rng.IntN(2)], Value: []string{"", "gpu"}[rng.IntN(2)], Effect: effect})
	}
	for i := range rng.IntN(4) {
		n.GPUs = append(n.GPUs, GPU{Index: i, Driver: []string{"nvidia", "amd"}[rng.IntN(2)], VRAMMiB: 4000 * (1 + rng.IntN(6)), InUse: rng.IntN(3) == 0})
	}
	return n
}

func randomNodes(rng *rand.Rand) []Node {
	nodes := make([]Node, rng.IntN(30))
	for i := range nodes {
		nodes[i] = randomNode(rng, fmt.Sprintf("n%02d", i))
	}
	return nodes
}

// randomRequest returns a Service (or, with daemons, sometimes a
// DaemonService) request of default/web.
func randomRequest(rng *rand.Rand, daemons bool) Request {
	r := Request{
		Key: "default/web", Type: quadlet.TypeService, Count: rng.IntN(40),
		CPU: rng.Int64N(3000), Memory: rng.Int64N(4 * gi),
	}
	if rng.IntN(4) == 0 {
		r.CPU, r.Memory = 0, 0
	}
	if daemons && rng.IntN(3) == 0 {
		r.Type = quadlet.TypeDaemonService
	}
	if rng.IntN(3) == 0 {
		r.NodeSelector = map[string]string{"zone": string(rune('a' + rng.IntN(3)))}
	}
	if rng.IntN(2) == 0 {
		r.Tolerations = []quadlet.Toleration{{Key: "dedicated", Operator: "Equal", Value: "gpu"}}
	}
	if rng.IntN(4) == 0 {
		r.GPU = &quadlet.GPU{Driver: []string{"any", "nvidia", "amd"}[rng.IntN(3)], MinVRAMMB: 4000 * rng.IntN(4)}
	}
	return r
}

func cloneNodes(nodes []Node) []Node {
	out := slices.Clone(nodes)
	for i := range out {
		out[i].GPUs = slices.Clone(out[i].GPUs)
		out[i].Used.Instances = maps.Clone(out[i].Used.Instances)
	}
	return out
}

// TestPropertyNeverOverCommits: every instance lands on a node that passes
// the filter and has room for it, no GPU is taken twice, and instances stay
// unplaced only when no node could take one more.
func TestPropertyNeverOverCommits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for round := range rounds {
		nodes := randomNodes(rng)
		r := randomRequest(rng, true)
		before := cloneNodes(nodes)
		res := Place(nodes, r, rng)
		Apply(nodes, r, res.Placements)

		taken := map[string]bool{}
		for _, p := range res.Placements {
			i := slices.IndexFunc(before, func(n Node) bool { return n.Name == p.Node })
			if f := staticCheck(&before[i], &r); f.failure != fits {
				t.Fatalf("round %d: %s placed on node %s, which fails %q", round, r.Key, p.Node, f.text(&r))
			}
			if (p.GPU >= 0) != (r.GPU != nil) {
				t.Fatalf("round %d: placement %+v for GPU request %+v", round, p, r.GPU)
			}
			if p.GPU >= 0 {
				g := before[i].GPUs[slices.IndexFunc(before[i].GPUs, func(g GPU) bool { return g.Index == p.GPU })]
				if g.InUse || taken[fmt.Sprint(p)] || !gpuMatches(r.GPU, g) {
					t.Fatalf("round %d: GPU %+v of node %s taken again or not matching %+v", round, g, p.Node, r.GPU)
				}
				taken[fmt.Sprint(p)] = true
			}
		}
		for i, n := range nodes {
			if n.Used.Instances[r.Key] == before[i].Used.Instances[r.Key] {
				continue
			}
			if (r.CPU > 0 && n.Used.CPU > n.CPU) || (r.Memory > 0 && n.Used.Memory > n.Memory) {
				t.Fatalf("round %d: node %s over-committed: allocatable %dm %dB, used %+v", round, n.Name, n.CPU, n.Memory, n.Used)
			}
		}
		if r.Type == quadlet.TypeDaemonService {
			continue
		}
		if len(res.Placements)+res.Unplaced != r.Count {
			t.Fatalf("round %d: %d placed + %d unplaced, want %d", round, len(res.Placements), res.Unplaced, r.Count)
		}
		if res.Unplaced > 0 {
			r.Count = 1
			if more := Place(nodes, r, nil); len(more.Placements) != 0 || more.Reason != res.Reason {
				t.Fatalf("round %d: %d left unplaced (%s), yet one more fits: %+v", round, res.Unplaced, res.Reason, more)
			}
		}
	}
}

// TestPropertySpreadsOverEqualNodes: the replicas of one request on
// identical nodes differ by at most one per node.
func TestPropertySpreadsOverEqualNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for round := range rounds {
		proto := randomNode(rng, "")
		nodes := make([]Node, 1+rng.IntN(12))
		for i := range nodes {
			nodes[i] = cloneNodes([]Node{proto})[0]
			nodes[i].Name = fmt.Sprintf("n%02d", i)
		}
		r := randomRequest(rng, false)
		res := Place(nodes, r, rng)
		counts := map[string]int{}
		for _, n := range nodes {
			counts[n.Name] = n.Used.Instances[r.Key]
		}
		for _, p := range res.Placements {
			counts[p.Node]++
		}
		lo, hi := math.MaxInt, 0
		for _, c := range counts {
			lo, hi = min(lo, c), max(hi, c)
		}
		if len(res.Placements) > 0 && hi-lo > 1 {
			t.Fatalf("round %d: %d replicas on %d equal nodes: %v", round, len(res.Placements), len(nodes), counts)
		}
	}
}

// TestPropertyDaemonOnePerEligibleNode: after placing a DaemonService every
// eligible node runs exactly one instance, the others none new, and placing
// it again changes nothing.
func TestPropertyDaemonOnePerEligibleNode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for round := range rounds {
		nodes := randomNodes(rng)
		r := randomRequest(rng, false)
		r.Type, r.Key = quadlet.TypeDaemonService, "default/agent"
		for i := range nodes {
			nodes[i].Used.Instances[r.Key] = rng.IntN(2)
		}
		before := cloneNodes(nodes)
		eligible, _ := Eligible(nodes, r)
		Apply(nodes, r, Place(nodes, r, rng).Placements)
		for i, n := range nodes {
			want := before[i].Used.Instances[r.Key]
			if slices.Contains(eligible, n.Name) {
				want = 1
			}
			if got := n.Used.Instances[r.Key]; got != want {
				t.Fatalf("round %d: node %s runs %d instances, want %d (eligible: %v)", round, n.Name, got, want, eligible)
			}
		}
		if again := Place(nodes, r, rng); len(again.Placements) != 0 {
			t.Fatalf("round %d: placing again adds %v", round, again.Placements)
		}
	}
}

// TestPropertyDeterministic: the same nodes, request and seed give the
// same result.
func TestPropertyDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for round := range rounds {
		nodes := randomNodes(rng)
		r := randomRequest(rng, true)
		seed := rng.Uint64()
		a := Place(nodes, r, rand.New(rand.NewPCG(seed, 0)))
		b := Place(cloneNodes(nodes), r, rand.New(rand.NewPCG(seed, 0)))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round %d: seed %d gave %+v, then %+v", round, seed, a, b)
		}
	}
}
