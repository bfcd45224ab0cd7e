package sched

import (
	"net/netip"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

func withSubnet(subnet string, free int) func(*Node) {
	return func(n *Node) { n.Subnet, n.FreeIPs = netip.MustParsePrefix(subnet), free }
}

func awaitingSubnet(n *Node) { n.NoSubnet = true }

// TestSubnetFilter covers the address rule: a node's free addresses bound
// its instances, a full subnet is named in the reason, and a node awaiting
// its subnet fits none.
func TestSubnetFilter(t *testing.T) {
	runPlaceTests(t, []placeTest{
		{name: "a free address fits", nodes: []Node{node("a", withSubnet("10.100.0.0/30", 1))}, req: req(1), want: "a"},
		{
			name: "a full subnet is named", nodes: []Node{node("a", withSubnet("10.100.2.0/23", 0))}, req: req(1),
			reason: "1 node: 1 subnet 10.100.2.0/23 full",
		},
		{
			name: "addresses run out within one request", nodes: []Node{node("a", withSubnet("10.100.0.0/29", 2))}, req: req(3),
			want: "a a", reason: "1 node: 1 subnet 10.100.0.0/29 full",
		},
		{
			name:  "another node with room takes what a full one cannot",
			nodes: []Node{node("a", withSubnet("10.100.0.0/29", 1)), node("b", withSubnet("10.100.0.8/29", 5), withUsed(3000, 0, nil))},
			req:   req(3), want: "a b b",
		},
		{
			name:  "each full subnet is named",
			nodes: []Node{node("a", withSubnet("10.100.0.0/29", 0)), node("b", withSubnet("10.100.0.8/29", 0)), node("c", withUsed(4000, 0, nil))},
			req:   req(1), reason: "3 nodes: 1 insufficient cpu, 1 subnet 10.100.0.0/29 full, 1 subnet 10.100.0.8/29 full",
		},
		{name: "a node without a subnet is not limited", nodes: []Node{node("a")}, req: req(2), want: "a a"},
		{name: "a node awaiting its subnet fits none", nodes: []Node{node("a", awaitingSubnet)}, req: req(1), reason: "1 node: 1 no overlay subnet yet"},
		{name: "a subnet overrides awaiting", nodes: []Node{node("a", awaitingSubnet, withSubnet("10.100.0.0/30", 1))}, req: req(1), want: "a"},
	})
}

func TestApplyTakesAddresses(t *testing.T) {
	nodes := []Node{node("a", withSubnet("10.100.0.0/29", 5)), node("b")}
	r := req(2)
	Apply(nodes, r, []Placement{{Node: "a", GPU: -1}, {Node: "a", GPU: -1}, {Node: "b", GPU: -1}})
	if nodes[0].FreeIPs != 3 || nodes[1].FreeIPs != 0 {
		t.Errorf("free addresses after Apply: a %d b %d, want 3 and 0 (b has no subnet)", nodes[0].FreeIPs, nodes[1].FreeIPs)
	}
}

// TestDaemonSubnet: a DaemonService keeps its instance on a node whose
// subnet is full or that awaits its subnet, and such a node without one
// counts as unplaced with the reason.
func TestDaemonSubnet(t *testing.T) {
	d := req(0, func(r *Request) { r.Type = quadlet.TypeDaemonService; r.Key = "default/agent" })
	nodes := []Node{
		node("a", withSubnet("10.100.0.0/30", 0), withUsed(0, 0, map[string]int{"default/agent": 1})),
		node("b", withSubnet("10.100.0.4/30", 0)),
		node("c", awaitingSubnet, withUsed(0, 0, map[string]int{"default/agent": 1})),
		node("d", awaitingSubnet),
		node("e", withSubnet("10.100.0.8/30", 1)),
	}
	names, _ := Eligible(nodes, d)
	if got := placed(placementsOf(names)); got != "a c e" {
		t.Errorf("eligible = %q, want a c e (nodes with an instance keep it)", got)
	}
	res := Place(nodes, d, nil)
	if got := placed(res.Placements); got != "e" {
		t.Errorf("placements = %q, want e", got)
	}
	if want := "5 nodes: 1 no overlay subnet yet, 1 subnet 10.100.0.4/30 full"; res.Unplaced != 2 || res.Reason != want {
		t.Errorf("unplaced %d (%q), want 2 (%q)", res.Unplaced, res.Reason, want)
	}
}

func placementsOf(names []string) []Placement {
	out := make([]Placement, len(names))
	for i, n := range names {
		out[i] = Placement{Node: n, GPU: -1}
	}
	return out
}
