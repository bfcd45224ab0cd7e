package sched

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

const (
	mi = 1 << 20
	gi = 1 << 30
)

// node returns a ready node with 4 cores and 8 GiB, changed by opts.
func node(name string, opts ...func(*Node)) Node {
	n := Node{Name: name, Ready: true, CPU: 4000, Memory: 8 * gi}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func withTaint(key, value, effect string) func(*Node) {
	return func(n *Node) { n.Taints = append(n.Taints, Taint{Key: key, Value: value, Effect: effect}) }
}

func withLabels(kv ...string) func(*Node) {
	return func(n *Node) {
		n.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			n.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withUsed(cpu, mem int64, instances map[string]int) func(*Node) {
	return func(n *Node) { n.Used = Usage{CPU: cpu, Memory: mem, Instances: instances} }
}

func withSize(cpu, mem int64) func(*Node) {
	return func(n *Node) { n.CPU, n.Memory = cpu, mem }
}

func withGPU(index int, driver string, vram int, inUse bool) func(*Node) {
	return func(n *Node) {
		n.GPUs = append(n.GPUs, GPU{Index: index, Driver: driver, VRAMMiB: vram, InUse: inUse})
	}
}

// req returns a request for count instances of default/web with 500m and
// 512Mi, changed by opts.
func req(count int, opts ...func(*Request)) Request {
	r := Request{Key: "default/web", Type: quadlet.TypeService, CPU: 500, Memory: 512 * mi, Count: count}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func tolerate(key, op, value, effect string) func(*Request) {
	return func(r *Request) {
		r.Tolerations = append(r.Tolerations, quadlet.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

// placed renders the nodes of placements, with the GPU index when one is
// taken: "a b:1".
func placed(ps []Placement) string {
	var parts []string
	for _, p := range ps {
		s := p.Node
		if p.GPU >= 0 {
			s += ":" + strconv.Itoa(p.GPU)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// placeTest is a case of Place without randomness.
type placeTest struct {
	name  string
	nodes []Node
	req   Request
	// want renders the placements as placed does; reason is
	// Result.Reason.
	want, reason string
}

func runPlaceTests(t *testing.T, tests []placeTest) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Place(tc.nodes, tc.req, nil)
			if got := placed(res.Placements); got != tc.want {
				t.Errorf("placements = %q, want %q", got, tc.want)
			}
			if res.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", res.Reason, tc.reason)
			}
			if want := max(tc.req.Count-len(res.Placements), 0); res.Unplaced != want {
				t.Errorf("unplaced = %d, want %d", res.Unplaced, want)
			}
		})
	}
}

// TestFilter covers each filter rule with one node (or a few) and a request
// for one instance.
func TestFilter(t *testing.T) {
	gpu := func(driver string, vram int) func(*Request) {
		return func(r *Request) { r.GPU = &quadlet.GPU{Driver: driver, MinVRAMMB: vram} }
	}
	tests := []placeTest{
		{name: "ready node", nodes: []Node{node("a")}, req: req(1), want: "a"},
		{name: "not ready", nodes: []Node{node("a", func(n *Node) { n.Ready = false })}, req: req(1), reason: "1 node: 1 not ready"},
		{name: "cordoned", nodes: []Node{node("a", func(n *Node) { n.Cordoned = true })}, req: req(1), reason: "1 node: 1 cordoned"},
		{
			name: "selector matches", nodes: []Node{node("a", withLabels("zone", "b", "disk", "ssd"))},
			req: req(1, func(r *Request) { r.NodeSelector = map[string]string{"zone": "b"} }), want: "a",
		},
		{
			name: "selector value differs", nodes: []Node{node("a", withLabels("zone", "a"))},
			req:    req(1, func(r *Request) { r.NodeSelector = map[string]string{"zone": "b"} }),
			reason: "1 node: 1 nodeSelector mismatch",
		},
		{
			name: "selector label missing", nodes: []Node{node("a")},
			req:    req(1, func(r *Request) { r.NodeSelector = map[string]string{"zone": ""} }),
			reason: "1 node: 1 nodeSelector mismatch",
		},
		{
			name: "NoSchedule taint not tolerated", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1), reason: "1 node: 1 taint dedicated=gpu:NoSchedule",
		},
		{
			name: "taint without value", nodes: []Node{node("a", withTaint("maintenance", "", NoSchedule))},
			req: req(1), reason: "1 node: 1 taint maintenance:NoSchedule",
		},
		{
			name: "tolerated by key with Exists", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("dedicated", "Exists", "", "")), want: "a",
		},
		{
			name: "tolerated by key with empty operator", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("dedicated", "", "", NoSchedule)), want: "a",
		},
		{
			name: "tolerated by Equal", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("dedicated", "Equal", "gpu", NoSchedule)), want: "a",
		},
		{
			name: "Equal with another value", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("dedicated", "Equal", "db", "")), reason: "1 node: 1 taint dedicated=gpu:NoSchedule",
		},
		{
			name: "toleration of another key", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("other", "Exists", "", "")), reason: "1 node: 1 taint dedicated=gpu:NoSchedule",
		},
		{
			name: "toleration of another effect", nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule))},
			req: req(1, tolerate("dedicated", "Exists", "", PreferNoSchedule)), reason: "1 node: 1 taint dedicated=gpu:NoSchedule",
		},
		{
			name:  "empty key with Exists tolerates everything",
			nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule), withTaint("x", "", NoSchedule))},
			req:   req(1, tolerate("", "Exists", "", "")), want: "a",
		},
		{
			name:  "first untolerated taint is the reason",
			nodes: []Node{node("a", withTaint("dedicated", "gpu", NoSchedule), withTaint("x", "", NoSchedule))},
			req:   req(1, tolerate("dedicated", "", "", "")), reason: "1 node: 1 taint x:NoSchedule",
		},
		{name: "PreferNoSchedule keeps the node", nodes: []Node{node("a", withTaint("slow", "", PreferNoSchedule))}, req: req(1), want: "a"},
		{name: "other effects are ignored", nodes: []Node{node("a", withTaint("x", "", "NoExecute"))}, req: req(1), want: "a"},
		{name: "request fills the node exactly", nodes: []Node{node("a", withUsed(3500, 7.5*gi, nil))}, req: req(1), want: "a"},
		{name: "insufficient cpu", nodes: []Node{node("a", withUsed(3501, 0, nil))}, req: req(1), reason: "1 node: 1 insufficient cpu"},
		{name: "insufficient memory", nodes: []Node{node("a", withUsed(0, 7.5*gi+1, nil))}, req: req(1), reason: "1 node: 1 insufficient memory"},
		{name: "cpu is checked before memory", nodes: []Node{node("a", withUsed(4000, 8*gi, nil))}, req: req(1), reason: "1 node: 1 insufficient cpu"},
		{
			name: "zero request fits an over-committed node", nodes: []Node{node("a", withUsed(5000, 9*gi, nil))},
			req: req(1, func(r *Request) { r.CPU, r.Memory = 0, 0 }), want: "a",
		},
		{
			name: "zero request fits a node without resources", nodes: []Node{node("a", withSize(0, 0))},
			req: req(1, func(r *Request) { r.CPU, r.Memory = 0, 0 }), want: "a",
		},
		{name: "no gpu", nodes: []Node{node("a")}, req: req(1, gpu("any", 0)), reason: "1 node: 1 no gpu"},
		{name: "any driver", nodes: []Node{node("a", withGPU(0, "amd", 8000, false))}, req: req(1, gpu("any", 0)), want: "a:0"},
		{name: "empty driver is any", nodes: []Node{node("a", withGPU(3, "amd", 8000, false))}, req: req(1, gpu("", 0)), want: "a:3"},
		{name: "other driver", nodes: []Node{node("a", withGPU(0, "amd", 8000, false))}, req: req(1, gpu("nvidia", 0)), reason: "1 node: 1 no nvidia gpu"},
		{name: "driver ignores case", nodes: []Node{node("a", withGPU(0, "NVIDIA", 8000, false))}, req: req(1, gpu("nvidia", 0)), want: "a:0"},
		{
			name: "too little vram", nodes: []Node{node("a", withGPU(0, "nvidia", 8000, false))},
			req: req(1, gpu("nvidia", 16000)), reason: "1 node: 1 no nvidia gpu with 16000 MiB",
		},
		{
			name: "smallest sufficient gpu", nodes: []Node{node("a", withGPU(0, "nvidia", 24000, false), withGPU(1, "nvidia", 4000, false), withGPU(2, "nvidia", 16000, false))},
			req: req(1, gpu("nvidia", 8000)), want: "a:2",
		},
		{
			name: "matching gpu in use", nodes: []Node{node("a", withGPU(0, "nvidia", 24000, true), withGPU(1, "nvidia", 4000, false))},
			req: req(1, gpu("nvidia", 8000)), reason: "1 node: 1 gpus in use",
		},
		{
			name: "each instance takes a gpu", nodes: []Node{node("a", withGPU(0, "amd", 8000, false), withGPU(1, "amd", 8000, false))},
			req: req(3, gpu("amd", 0)), want: "a:0 a:1", reason: "1 node: 1 gpus in use",
		},
		{name: "no nodes", req: req(2), reason: "no nodes"},
	}
	runPlaceTests(t, tests)
}

// TestScore covers the order in which candidates are preferred.
func TestScore(t *testing.T) {
	web := func(n int) map[string]int { return map[string]int{"default/web": n} }
	tests := []placeTest{
		{name: "most empty", nodes: []Node{node("a", withUsed(2000, 4*gi, nil)), node("b"), node("c", withUsed(1000, 0, nil))}, req: req(1), want: "b"},
		{
			name:  "free fraction, not free amount",
			nodes: []Node{node("big", withSize(8000, 16*gi), withUsed(4000, 8*gi, nil)), node("small", withSize(2000, 4*gi))},
			req:   req(1), want: "small",
		},
		{name: "cpu and memory both count", nodes: []Node{node("a", withUsed(2000, 0, nil)), node("b", withUsed(0, 5*gi, nil))}, req: req(1), want: "a"},
		{
			name:  "untolerated PreferNoSchedule last",
			nodes: []Node{node("tainted", withTaint("slow", "", PreferNoSchedule)), node("busy", withUsed(3000, 6*gi, nil))},
			req:   req(1), want: "busy",
		},
		{
			name:  "tolerated PreferNoSchedule is no penalty",
			nodes: []Node{node("tainted", withTaint("slow", "", PreferNoSchedule)), node("busy", withUsed(3000, 6*gi, nil))},
			req:   req(1, tolerate("slow", "Exists", "", PreferNoSchedule)), want: "tainted",
		},
		{
			name:  "an avoided node last",
			nodes: []Node{node("failed-here"), node("busy", withUsed(3000, 6*gi, nil))},
			req:   req(1, func(r *Request) { r.Avoid = map[string]bool{"failed-here": true} }), want: "busy",
		},
		{
			name:  "an avoided node when the others are full",
			nodes: []Node{node("failed-here"), node("full", withUsed(4000, 8*gi, nil))},
			req:   req(1, func(r *Request) { r.Avoid = map[string]bool{"failed-here": true} }), want: "failed-here",
		},
		{
			name:  "PreferNoSchedule when the others are full",
			nodes: []Node{node("tainted", withTaint("slow", "", PreferNoSchedule)), node("full", withUsed(4000, 8*gi, nil))},
			req:   req(2), want: "tainted tainted",
		},
		{
			name:  "equal scores: fewer instances of the workload",
			nodes: []Node{node("a", withUsed(1000, gi, web(2))), node("b", withUsed(1000, gi, map[string]int{"default/db": 1, "default/web": 1}))},
			req:   req(1), want: "b",
		},
		{
			name:  "equal scores and counts: first without randomness",
			nodes: []Node{node("a"), node("b"), node("c")}, req: req(1), want: "a",
		},
		{name: "replicas spread", nodes: []Node{node("a"), node("b")}, req: req(4), want: "a b a b"},
		{
			name:  "zero requests spread by instance count",
			nodes: []Node{node("a", withUsed(0, 0, web(1))), node("b")},
			req:   req(3, func(r *Request) { r.CPU, r.Memory = 0, 0 }), want: "b a b",
		},
		{
			name:  "accounting between picks",
			nodes: []Node{node("a", withSize(2000, 8*gi)), node("b", withSize(1000, 8*gi))},
			req:   req(4, func(r *Request) { r.CPU = 1000 }), want: "a b a", reason: "2 nodes: 2 insufficient cpu",
		},
	}
	runPlaceTests(t, tests)
}

func TestPlaceBreaksTiesAtRandom(t *testing.T) {
	nodes := []Node{node("a"), node("b"), node("c")}
	seen := map[string]int{}
	for seed := range uint64(60) {
		res := Place(nodes, req(1), rand.New(rand.NewPCG(seed, 0)))
		seen[res.Placements[0].Node]++
	}
	for _, n := range nodes {
		if seen[n.Name] < 5 {
			t.Errorf("node %s picked %d times of 60, want each of 3 equal nodes about 20: %v", n.Name, seen[n.Name], seen)
		}
	}
}

func TestPlaceLeavesNodesAlone(t *testing.T) {
	nodes := []Node{node("a", withUsed(100, mi, map[string]int{"default/web": 1}), withGPU(0, "nvidia", 8000, false))}
	Place(nodes, req(2, func(r *Request) { r.GPU = &quadlet.GPU{Driver: "any"} }), nil)
	if u := nodes[0].Used; u.CPU != 100 || u.Memory != mi || u.Instances["default/web"] != 1 || nodes[0].GPUs[0].InUse {
		t.Errorf("Place changed its input: %+v", nodes[0])
	}
}

func TestReason(t *testing.T) {
	nodes := []Node{
		node("a", withUsed(0, 8*gi, nil)),
		node("b", withTaint("dedicated", "gpu", NoSchedule)),
		node("c", withUsed(0, 8*gi, nil)),
		node("d", func(n *Node) { n.Ready = false }),
		node("e", func(n *Node) { n.Cordoned = true; n.Ready = false }),
		node("f", withTaint("dedicated", "gpu", NoSchedule)),
		node("g", withUsed(4000, 0, nil)),
	}
	res := Place(nodes, req(1), nil)
	// Two each of memory, not ready and the taint, by text; a node counts
	// once, under its first reason.
	want := "7 nodes: 2 insufficient memory, 2 not ready, 2 taint dedicated=gpu:NoSchedule, 1 insufficient cpu"
	if res.Reason != want || res.Cause != "insufficient_memory" {
		t.Errorf("reason = %q, cause %q; want %q, insufficient_memory (the first reason's)", res.Reason, res.Cause, want)
	}
	if res := Place(nil, req(1), nil); res.Reason != "no nodes" || res.Cause != "no_nodes" {
		t.Errorf("without nodes: reason %q, cause %q", res.Reason, res.Cause)
	}
}

func TestNewRequest(t *testing.T) {
	spec := &quadlet.WorkloadSpec{
		Type:         quadlet.TypeService,
		NodeSelector: map[string]string{"zone": "a"},
		Tolerations:  []quadlet.Toleration{{Key: "k", Operator: "Exists"}},
		Container: quadlet.Container{Resources: quadlet.Resources{
			Requests: quadlet.ResourceList{CPU: "0.25"},
			Limits:   quadlet.ResourceList{CPU: "1", Memory: "1Gi"},
			GPU:      &quadlet.GPU{Driver: "nvidia", MinVRAMMB: 4000},
		}},
	}
	r, err := NewRequest("ns/w", spec, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r.Key != "ns/w" || r.Type != quadlet.TypeService || r.CPU != 250 || r.Memory != gi || r.Count != 3 ||
		r.NodeSelector["zone"] != "a" || len(r.Tolerations) != 1 || r.GPU.MinVRAMMB != 4000 {
		t.Errorf("NewRequest = %+v", r)
	}
	r, err = NewRequest("ns/w", &quadlet.WorkloadSpec{Type: quadlet.TypeJob}, 1)
	if err != nil || r.CPU != 0 || r.Memory != 0 {
		t.Errorf("NewRequest without resources = %+v, %v", r, err)
	}
	spec.Container.Resources.Requests.Memory = "lots"
	if _, err := NewRequest("ns/w", spec, 1); err == nil || !strings.Contains(err.Error(), "ns/w") {
		t.Errorf("NewRequest with a bad memory request: err = %v, want one naming the workload", err)
	}
}

func TestDaemonService(t *testing.T) {
	daemon := func(r *Request) { r.Type, r.Key, r.Count = quadlet.TypeDaemonService, "kube/agent", 0 }
	nodes := []Node{
		node("a"),
		node("b", withUsed(4000, 8*gi, map[string]int{"kube/agent": 1})), // full, but runs it already
		node("c", withUsed(4000, 0, nil)),
		node("d", withTaint("dedicated", "gpu", NoSchedule)),
		node("e", withLabels("role", "edge")),
	}
	names, why := Eligible(nodes, req(0, daemon))
	if want := []string{"a", "b", "e"}; !slices.Equal(names, want) {
		t.Errorf("Eligible = %v, want %v", names, want)
	}
	if want := "5 nodes: 1 insufficient cpu, 1 taint dedicated=gpu:NoSchedule"; why != want {
		t.Errorf("Eligible's reason = %q, want %q", why, want)
	}
	res := Place(nodes, req(0, daemon), nil)
	if got := placed(res.Placements); got != "a e" || res.Reason != why || res.Unplaced != 1 {
		t.Errorf("Place = %+v, want a and e placed, c (full) unplaced, reason %q", res, why)
	}

	names, why = Eligible(nodes[:2], req(0, daemon))
	if !slices.Equal(names, []string{"a", "b"}) || why != "" {
		t.Errorf("Eligible of eligible nodes = %v, %q", names, why)
	}
	names, _ = Eligible(nodes, req(0, daemon, func(r *Request) { r.NodeSelector = map[string]string{"role": "edge"} }))
	if !slices.Equal(names, []string{"e"}) {
		t.Errorf("Eligible with a nodeSelector = %v, want [e]", names)
	}
}

func TestApply(t *testing.T) {
	nodes := []Node{node("a", withGPU(5, "nvidia", 8000, false)), node("b", withUsed(100, mi, map[string]int{"default/web": 1}))}
	r := req(3, func(r *Request) { r.GPU = &quadlet.GPU{Driver: "any"} })
	Apply(nodes, r, []Placement{{Node: "a", GPU: 5}, {Node: "b", GPU: -1}, {Node: "b", GPU: -1}, {Node: "gone", GPU: 1}})
	if u := nodes[0].Used; u.CPU != 500 || u.Memory != 512*mi || u.Instances["default/web"] != 1 || !nodes[0].GPUs[0].InUse {
		t.Errorf("node a after Apply: %+v", nodes[0])
	}
	if u := nodes[1].Used; u.CPU != 1100 || u.Memory != 1025*mi || u.Instances["default/web"] != 3 {
		t.Errorf("node b after Apply: %+v", nodes[1])
	}
}
