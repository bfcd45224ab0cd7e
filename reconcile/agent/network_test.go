package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// fakeNetworks records the networks the agent ensures; fail, when set,
// fails them.
type fakeNetworks struct {
	mu    sync.Mutex
	specs []runtime.NetworkSpec
	fail  error
}

func (f *fakeNetworks) EnsureNetwork(_ context.Context, spec runtime.NetworkSpec) (bool, error) {
	if err := spec.Validate(); err != nil {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return false, f.fail
	}
	created := len(f.specs) == 0 || f.specs[len(f.specs)-1] != spec
	if created {
		f.specs = append(f.specs, spec)
	}
	return created, nil
}

func (f *fakeNetworks) ensured() []runtime.NetworkSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}

// TestAgentJoinsInstancesToTheNodeNetwork: the agent makes its node's
// network from the node's record (subnet, gateway at the overlay address)
// and makes it again when the subnet changes; an instance with an address
// waits, saying why, until the network is made, then runs on it at exactly
// its address with the node's DNS server as its only nameserver and its
// namespace's search path; an instance without one runs as before IPAM.
func TestAgentJoinsInstancesToTheNodeNetwork(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	nets := &fakeNetworks{}
	e.networks = nets
	ctx := t.Context()
	ag, _ := e.start()

	plain := e.assign("plain-1", "Always", "sleep 1d", false)
	withIP := plain
	withIP.InstanceID, withIP.IP = "addr-1", netip.MustParseAddr("10.100.0.10")
	if _, err := e.repo.WriteAssignments(ctx, []api.Assignment{withIP}, nil); err != nil {
		t.Fatal(err)
	}
	e.waitFor("plain runs, addr waits for the network", ag, func(m map[string]api.InstanceStatus) bool {
		return m["plain-1"].Phase == api.InstanceRunning && strings.Contains(m["addr-1"].Message, "no overlay subnet yet")
	})
	if s := e.rt.specOf("kat_plain-1"); s.Network != "" || s.IP.IsValid() || s.DNS != nil {
		t.Errorf("instance without an address got network %q ip %v dns %v", s.Network, s.IP, s.DNS)
	}

	nn, err := e.repo.EnsureNodeNetwork(ctx, "n1", netip.MustParsePrefix("10.100.0.0/16"), 8, "", "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("addr runs once the network is made", ag, func(m map[string]api.InstanceStatus) bool {
		return m["addr-1"].Phase == api.InstanceRunning
	})
	want := runtime.NetworkSpec{Name: DefaultNetworkName, Subnet: netip.MustParsePrefix("10.100.0.0/24"), Gateway: netip.MustParseAddr("10.100.0.1")}
	if got := nets.ensured(); len(got) != 1 || got[0] != want || nn.OverlayIP() != want.Gateway {
		t.Errorf("networks ensured %+v, want %+v", got, want)
	}
	s := e.rt.specOf("kat_addr-1")
	if s.Network != DefaultNetworkName || s.IP != withIP.IP || !slices.Equal(s.DNS, []netip.Addr{want.Gateway}) ||
		!slices.Equal(s.DNSSearch, []string{"ns1.kat.test", "kat.test"}) || !slices.Equal(s.DNSOptions, []string{"ndots:2"}) {
		t.Errorf("container spec: network %q ip %v dns %v search %v options %v", s.Network, s.IP, s.DNS, s.DNSSearch, s.DNSOptions)
	}

	// The node's subnet changes: the network follows; while it cannot be
	// made, a new instance with an address waits, saying why.
	nets.mu.Lock()
	nets.fail = errors.New("subnet 10.100.1.0/24 is already used on the host")
	nets.mu.Unlock()
	if _, err := e.repo.Store().Txn(ctx, nil, []store.Op{{Type: store.OpPut, Key: resources.NodeSubnetKey("n1"), Value: []byte("10.100.1.0/24")}}, nil); err != nil {
		t.Fatal(err)
	}
	next := withIP
	next.InstanceID, next.IP = "addr-2", netip.MustParseAddr("10.100.1.7")
	if _, err := e.repo.WriteAssignments(ctx, []api.Assignment{next}, nil); err != nil {
		t.Fatal(err)
	}
	e.waitFor("addr-2 waits for the network, naming it", ag, func(m map[string]api.InstanceStatus) bool {
		return strings.Contains(m["addr-2"].Message, "network kat (subnet 10.100.1.0/24): subnet 10.100.1.0/24 is already used")
	})
	nets.mu.Lock()
	nets.fail = nil
	nets.mu.Unlock()
	e.waitFor("addr-2 runs once the network is made again", ag, func(m map[string]api.InstanceStatus) bool {
		return m["addr-2"].Phase == api.InstanceRunning
	})
	got := nets.ensured()
	want.Subnet, want.Gateway = netip.MustParsePrefix("10.100.1.0/24"), netip.MustParseAddr("10.100.1.1")
	if len(got) != 2 || got[1] != want {
		t.Errorf("networks ensured %+v, want the second %+v", got, want)
	}
	if s := e.rt.specOf("kat_addr-2"); s.IP != next.IP || !slices.Equal(s.DNS, []netip.Addr{want.Gateway}) {
		t.Errorf("addr-2: ip %v dns %v", s.IP, s.DNS)
	}
}

func (f *fakeRuntime) specOf(name string) runtime.ContainerSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.specs[name]
}
