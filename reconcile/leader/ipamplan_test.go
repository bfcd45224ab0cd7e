package leader

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

func subnet(s string, free int) func(*sched.Node) {
	return func(n *sched.Node) { n.Subnet, n.FreeIPs = netip.MustParsePrefix(s), free }
}

// TestPlanAssignmentsGivesAddresses: the pure planner gives each new
// instance the lowest address of its node's subnet that no instance holds
// and that was not released lately, none to an instance on a node without a
// subnet, and a second plan that sees the first's assignments never gives
// out one of their addresses.
func TestPlanAssignmentsGivesAddresses(t *testing.T) {
	t.Parallel()
	a := schedWorkload(t, "a", quadlet.TypeService, wopts{replicas: 3})
	b := schedWorkload(t, "b", quadlet.TypeService, wopts{replicas: 3})
	n := 0
	suffix := func() string { n++; return fmt.Sprintf("s%d", n) }
	held := func(current []api.Assignment, cooling ...string) func(string) ([]netip.Addr, []netip.Addr) {
		return func(node string) ([]netip.Addr, []netip.Addr) {
			var h, c []netip.Addr
			for _, x := range current {
				if x.Node == node && x.IP.IsValid() {
					h = append(h, x.IP)
				}
			}
			for _, s := range cooling {
				c = append(c, netip.MustParseAddr(s))
			}
			return h, c
		}
	}
	render := func(as []api.Assignment) string {
		var out []string
		for _, x := range as {
			ip := "-"
			if x.IP.IsValid() {
				ip = x.IP.String()
			}
			out = append(out, x.Node+"="+ip)
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	nodes := []sched.Node{node("n1", subnet("10.100.0.0/29", 5)), node("n2")}
	first := PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{a}, Now: time.Unix(100, 0), NewSuffix: suffix,
		HeldIPs: held(nil, "10.100.0.2")})
	if got, want := render(first.Put), "n1=10.100.0.3 n1=10.100.0.4 n2=-"; got != want {
		t.Fatalf("first plan = %q, want %q (10.100.0.2 cools down, n2 has no subnet)", got, want)
	}
	// The second plan sees the first's assignments: usage and addresses.
	nodes[0].FreeIPs, nodes[0].Used.CPU = 3, 0
	second := PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{b}, Now: time.Unix(101, 0),
		NewSuffix: suffix, HeldIPs: held(first.Put)})
	if got, want := render(second.Put), "n1=10.100.0.2 n1=10.100.0.5 n2=-"; got != want {
		t.Fatalf("second plan = %q, want %q", got, want)
	}
	// A full subnet: the instance that fits nowhere else is Pending, named.
	nodes = []sched.Node{node("n1", subnet("10.100.0.0/30", 1))}
	full := PlanAssignments(AssignInput{Nodes: nodes, Desired: []workload{b}, Now: time.Unix(102, 0), NewSuffix: suffix})
	st := full.Scheduling["ns1/b"]
	if got := render(full.Put); got != "n1=10.100.0.2" || st.Unplaced != 2 || st.Reason != "1 node: 1 subnet 10.100.0.0/30 full" {
		t.Errorf("full subnet: put %q, unplaced %d (%q)", got, st.Unplaced, st.Reason)
	}
}
