package leader

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/netstack/ipam"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// testCIDR with subnetBits 13 gives each node a /29: 5 instance addresses.
var testCIDR = netip.MustParsePrefix("10.100.0.0/16")

const testSubnetBits = 13

// giveSubnet gives node its overlay subnet, as the leader does at join.
func (e *leaderEnv) giveSubnet(node string) netip.Prefix {
	e.t.Helper()
	nn, err := e.repo.EnsureNodeNetwork(e.ctx, node, testCIDR, testSubnetBits, "", "")
	if err != nil {
		e.t.Fatal(err)
	}
	return nn.Subnet
}

// checkAddresses fails the test unless the assignments and /kat/ipam agree:
// every assignment with an address has an instance address of its node's
// subnet (and none has one on a node without a subnet),
// recorded under its IPAMKey with its instance ID, in the transaction that
// wrote it; no address is held twice on a node; and no address key outlives
// its assignment. It returns the addresses by instance ID.
func (e *leaderEnv) checkAddresses() map[string]netip.Addr {
	e.t.Helper()
	st := e.repo.Store()
	nets, err := e.repo.ListNodeNetworks(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	subnet := map[string]netip.Prefix{}
	for _, n := range nets {
		subnet[n.Node] = n.Subnet
	}
	akvs, err := st.List(e.ctx, resources.AssignmentsPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	ikvs, err := st.List(e.ctx, resources.IPAMPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	keys := map[string]store.KV{}
	for _, kv := range ikvs {
		keys[kv.Key] = kv
	}
	out := map[string]netip.Addr{}
	onNode := map[string]string{}
	for _, kv := range akvs {
		a, err := resources.DecodeAssignment(kv.Value)
		if err != nil {
			e.t.Fatal(err)
		}
		sub, has := subnet[a.Node]
		if !has {
			if a.IP.IsValid() {
				e.t.Errorf("%s on node %s without a subnet has address %s", a.InstanceID, a.Node, a.IP)
			}
			continue
		}
		if !a.IP.IsValid() {
			continue // written before its node had a subnet: runs as it is
		}
		if !ipam.InstanceAddress(sub, a.IP) {
			e.t.Errorf("%s on %s has address %v, not an instance address of %s", a.InstanceID, a.Node, a.IP, sub)
			continue
		}
		k := a.Node + "/" + a.IP.String()
		if other, dup := onNode[k]; dup {
			e.t.Errorf("%s and %s both hold %s on %s", other, a.InstanceID, a.IP, a.Node)
		}
		onNode[k] = a.InstanceID
		ik, ok := keys[resources.IPAMKey(a.Node, a.IP)]
		switch {
		case !ok:
			e.t.Errorf("%s holds %s on %s without its key under /kat/ipam", a.InstanceID, a.IP, a.Node)
		case string(ik.Value) != a.InstanceID:
			e.t.Errorf("%s holds %s on %s, whose key names %q", a.InstanceID, a.IP, a.Node, ik.Value)
		case ik.Version != kv.Version && a.LeavingAt.IsZero(): // a leaving instance is written again
			e.t.Errorf("%s and its address key were written at revisions %d and %d, not in one transaction", a.InstanceID, kv.Version, ik.Version)
		}
		delete(keys, resources.IPAMKey(a.Node, a.IP))
		out[a.InstanceID] = a.IP
	}
	for k, kv := range keys {
		e.t.Errorf("address key %s (%s) outlives its assignment", k, kv.Value)
	}
	return out
}

// deletions records, for each key deleted under /kat/ while it runs, the
// revision of the deletion.
type deletions struct {
	mu  sync.Mutex
	rev map[string]int64
}

func (e *leaderEnv) watchDeletions() *deletions {
	e.t.Helper()
	d := &deletions{rev: map[string]int64{}}
	ctx, cancel := context.WithCancel(e.ctx)
	ch, err := e.repo.Store().Watch(ctx, "/kat/", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range ch {
			if ev.Type == store.EventTypeDelete {
				d.mu.Lock()
				d.rev[ev.KV.Key] = ev.KV.Version
				d.mu.Unlock()
			}
		}
	})
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return d
}

// released waits until the assignments as are deleted with their address
// keys, each pair in one transaction.
func (d *deletions) released(t *testing.T, what string, as []api.Assignment) {
	t.Helper()
	polltest.Until(t, 10*time.Second, what, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, a := range as {
			ar, ok1 := d.rev[resources.AssignmentKey(a.Node, a.InstanceID)]
			ir, ok2 := d.rev[resources.IPAMKey(a.Node, a.IP)]
			if !ok1 || !ok2 {
				return false
			}
			if ir < ar {
				return false // an earlier holder's release of the same address; this one's is on its way
			}
			if ar != ir {
				t.Fatalf("%s: %s deleted at revision %d, its address key at %d: not one transaction", what, a.InstanceID, ar, ir)
			}
		}
		return true
	})
}

func on(as []api.Assignment, node string) []api.Assignment {
	var out []api.Assignment
	for _, a := range as {
		if a.Node == node {
			out = append(out, a)
		}
	}
	return out
}

// TestLeaderAddressesFollowAssignments: every instance placed on a node
// with a subnet gets an address of it, recorded under /kat/ipam in the
// transaction that writes its assignment, and released in the transaction
// that deletes it, on every path: scale down, replacement by a new spec,
// node loss, workload deletion and node deletion. A released address is not
// handed out again while others are free.
func TestLeaderAddressesFollowAssignments(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.register("n2", nil)
	e.giveSubnet("n1")
	e.giveSubnet("n2")
	b := e.startBeater("n1", "n2")
	defer b.stop()
	dels := e.watchDeletions()
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 4, "v1"), api.APIOwner())
	_, stop := e.run(Config{NodeLossTimeout: 2 * time.Second})
	defer stop()
	polltest.Until(t, 10*time.Second, "web placed 2/2", func() bool { return e.onNodes("web") == "n1:2 n2:2" })
	ips := e.checkAddresses()
	if len(ips) != 4 {
		t.Fatalf("%d instances with addresses, want 4", len(ips))
	}

	// Scale down.
	before := e.assignments("web")
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 2, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "web scaled to 2", func() bool { return len(e.assignments("web")) == 2 })
	var gone []api.Assignment
	for _, a := range before {
		if !slices.ContainsFunc(e.assignments("web"), func(b api.Assignment) bool { return b.InstanceID == a.InstanceID }) {
			gone = append(gone, a)
		}
	}
	dels.released(t, "scale down releases the addresses", gone)
	e.checkAddresses()

	// Scale up again: the released addresses cool down while others are
	// free.
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 4, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "web back to 4", func() bool { return len(e.assignments("web")) == 4 })
	for id, ip := range e.checkAddresses() {
		for _, g := range gone {
			if g.IP == ip {
				t.Errorf("%s got %s, released seconds ago, while its subnet had free addresses", id, ip)
			}
		}
	}

	// Replacement, rolling: a new instance at a time, an old one going
	// once a new one is ready, each with its own address.
	old := e.assignments("web")
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 4, "v2"), api.APIOwner())
	polltest.Until(t, 30*time.Second, "only v2 instances", func() bool {
		cur := e.assignments("web")
		// Within one listing, no two instances share an address.
		// (checkAddresses compares two reads, which a rollout in flight
		// can split: it runs once the rollout is over.)
		held := map[string]string{}
		for _, a := range cur {
			k := a.Node + "/" + a.IP.String()
			if other, dup := held[k]; dup {
				t.Errorf("%s and %s both hold %s", other, a.InstanceID, k)
			}
			held[k] = a.InstanceID
		}
		var fresh []api.Assignment
		left := 0
		for _, a := range cur {
			if slices.ContainsFunc(old, func(o api.Assignment) bool { return o.InstanceID == a.InstanceID }) {
				left++
			} else {
				fresh = append(fresh, a)
			}
		}
		// Every instance reports ready: the new ones let old ones go.
		e.reportOn("n1", on(cur, "n1")...)
		e.reportOn("n2", on(cur, "n2")...)
		return left == 0 && len(fresh) == 4
	})
	dels.released(t, "replaced instances release their addresses", old)
	e.checkAddresses()

	// Node loss: n2's instances are replaced on n1, which has 5 addresses
	// for 4 instances.
	lost := on(e.assignments("web"), "n2")
	b.set("n2", false)
	dels.released(t, "instances of the lost node release their addresses", lost)
	if got := e.onNodes("web"); got != "n1:4" {
		t.Errorf("web after n2 was lost = %q, want n1:4", got)
	}
	e.checkAddresses()

	// Workload deletion.
	e.apply(workloadFiles(t, "api", quadlet.TypeService, 1, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "api placed", func() bool { return len(e.assignments("api")) == 1 })
	webs := e.assignments("web")
	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "web"}); err != nil {
		t.Fatal(err)
	}
	dels.released(t, "a deleted workload's instances release their addresses", webs)
	e.checkAddresses()

	// Node deletion: n1 goes with its addresses.
	apis := e.assignments("api")
	b.set("n2", true)
	if err := e.repo.DeleteNode(e.ctx, apis[0].Node); err != nil {
		t.Fatal(err)
	}
	dels.released(t, "a deleted node's instances release their addresses", apis)
	polltest.Until(t, 10*time.Second, "api placed on n2", func() bool { return e.onNodes("api") == "n2:1" })
	e.checkAddresses()
}

// TestLeaderFullSubnetLeavesInstancesPending: a node whose subnet is full
// takes no more instances; with no other node the rest stay Pending with a
// reason naming the subnet, and a node that joins with room takes them.
func TestLeaderFullSubnetLeavesInstancesPending(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	sub := e.giveSubnet("n1")
	b := e.startBeater("n1")
	defer b.stop()
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 6, "v1"), api.APIOwner())
	_, stop := e.run(Config{})
	defer stop()
	want := "1 node: 1 subnet " + sub.String() + " full"
	polltest.Until(t, 10*time.Second, "5 placed and 1 Pending for the full subnet", func() bool {
		st := e.status("web")
		return len(e.assignments("web")) == 5 && st.Unplaced == 1 && st.UnplacedReason == want
	})
	e.checkAddresses()

	e.register("n2", nil)
	e.giveSubnet("n2")
	b.stop()
	b2 := e.startBeater("n1", "n2")
	defer b2.stop()
	polltest.Until(t, 10*time.Second, "the node with room takes the sixth", func() bool {
		return e.onNodes("web") == "n1:5 n2:1" && e.status("web").Unplaced == 0
	})
	e.checkAddresses()
}

// TestLeaderNodeAwaitingItsSubnet: once the overlay is on (a node has a
// subnet), a node without one takes no instance, with a reason saying so,
// until it gets its subnet; in a cluster where no node has one, instances
// are placed without addresses as before IPAM.
func TestLeaderNodeAwaitingItsSubnet(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.register("n2", nil)
	b := e.startBeater("n1", "n2")
	defer b.stop()
	e.apply(workloadFiles(t, "old", quadlet.TypeService, 2, "v1"), api.APIOwner())
	l, stop := e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "old placed without addresses", func() bool { return e.onNodes("old") == "n1:1 n2:1" })
	for _, a := range e.assignments("old") {
		if a.IP.IsValid() {
			t.Errorf("%s got address %s in a cluster without subnets", a.InstanceID, a.IP)
		}
	}

	e.giveSubnet("n1")
	// The view follows the subnets and the desired state by two watches:
	// a workload applied at once may be planned before the subnet shows.
	polltest.Until(t, 10*time.Second, "the leader sees n1's subnet", func() bool { return l.view.subnets.Len() == 1 })
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "web on n1 with an address", func() bool {
		as := e.assignments("web")
		return len(as) == 1 && as[0].Node == "n1" && as[0].IP.IsValid()
	})
	// n1 keeps room for 4 more; fill it so that only n2 could take more.
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 6, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "n2 awaits its subnet", func() bool {
		st := e.status("web")
		return e.onNodes("web") == "n1:5" && st.Unplaced == 1 && strings.Contains(st.UnplacedReason, "1 no overlay subnet yet")
	})
	if got := e.onNodes("old"); got != "n1:1 n2:1" {
		t.Errorf("old = %q after the overlay came on, want its instances kept", got)
	}
	e.giveSubnet("n2")
	polltest.Until(t, 10*time.Second, "n2 takes the sixth once it has its subnet", func() bool {
		return e.onNodes("web") == "n1:5 n2:1" && e.status("web").Unplaced == 0
	})
	e.checkAddresses()
}

// TestPlacementFromAStaleViewNeverSharesAnAddress: two terms' placement
// passes, the second planning from a copy that lacks the first's writes,
// never give one address to two instances: the second's transaction is
// refused and writes nothing, and a pass from a current view succeeds with
// other addresses.
func TestPlacementFromAStaleViewNeverSharesAnAddress(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.giveSubnet("n1")
	b := e.startBeater("n1")
	defer b.stop()
	e.apply(workloadFiles(t, "a", quadlet.TypeService, 2, "v1"), api.APIOwner())
	e.apply(workloadFiles(t, "b", quadlet.TypeService, 2, "v1"), api.APIOwner())
	view := func() (*Leader, func()) {
		l, err := New(Config{Repo: e.repo, NodeLossTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = l.view.run(ctx) })
		if err := l.view.waitSynced(e.ctx); err != nil {
			t.Fatal(err)
		}
		return l, func() { cancel(); wg.Wait() }
	}
	l1, stop1 := view()
	defer stop1()
	l2, stop2 := view()
	stop2() // its copy stays as it was: without what l1 writes
	if err := l1.placeOnce(e.ctx, []string{"ns1/a"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Second)
	defer cancel()
	if err := l2.placeOnce(ctx, []string{"ns1/b"}); !errors.Is(err, resources.ErrAddressTaken) {
		t.Fatalf("placement from a stale view: %v, want ErrAddressTaken", err)
	}
	if n := len(e.assignments("b")); n != 0 {
		t.Errorf("the refused pass wrote %d assignments", n)
	}
	e.checkAddresses()
	l3, stop3 := view()
	defer stop3()
	if err := l3.placeOnce(e.ctx, []string{"ns1/b"}); err != nil {
		t.Fatal(err)
	}
	if got := len(e.checkAddresses()); got != 4 {
		t.Errorf("%d instances with addresses, want 4", got)
	}
}
