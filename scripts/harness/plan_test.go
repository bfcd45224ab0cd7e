package harness

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestPlan(t *testing.T) {
	c, err := plan("kat", 3, netip.MustParsePrefix("172.30.7.9/24"), "/var/tmp/kat-cluster")
	if err != nil {
		t.Fatal(err)
	}
	if c.Subnet.String() != "172.30.7.0/24" || c.Gateway.String() != "172.30.7.1" {
		t.Errorf("subnet %v gateway %v, want 172.30.7.0/24 and 172.30.7.1", c.Subnet, c.Gateway)
	}
	var got []string
	for _, h := range c.Hosts {
		got = append(got, strings.Join([]string{h.Name, h.Netns, h.Prefix.String(), h.VethHost, h.DataDir, h.PodmanRoot, h.RunRoot, h.NetworkConfigDir, h.TmpDir}, " "))
	}
	id := linkID("kat")
	want := []string{
		"node1 kat-node1 172.30.7.2/24 kh-" + id + "-1 /var/tmp/kat-cluster/node1/data /var/tmp/kat-cluster/node1/podman/root /var/tmp/kat-cluster/node1/podman/run /var/tmp/kat-cluster/node1/podman/networks /var/tmp/kat-cluster/node1/tmp",
		"node2 kat-node2 172.30.7.3/24 kh-" + id + "-2 /var/tmp/kat-cluster/node2/data /var/tmp/kat-cluster/node2/podman/root /var/tmp/kat-cluster/node2/podman/run /var/tmp/kat-cluster/node2/podman/networks /var/tmp/kat-cluster/node2/tmp",
		"node3 kat-node3 172.30.7.4/24 kh-" + id + "-3 /var/tmp/kat-cluster/node3/data /var/tmp/kat-cluster/node3/podman/root /var/tmp/kat-cluster/node3/podman/run /var/tmp/kat-cluster/node3/podman/networks /var/tmp/kat-cluster/node3/tmp",
	}
	if !slices.Equal(got, want) {
		t.Errorf("hosts:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if c.Bridge != "kh-"+id || len(c.Bridge) > 15 {
		t.Errorf("bridge %q", c.Bridge)
	}
	wantRule := "-i kh-" + id + " -o kh-" + id + " -m comment --comment kat-harness kat -j ACCEPT"
	if len(c.Rules) != 1 || c.Rules[0].Chain != "FORWARD" || strings.Join(c.Rules[0].Spec, " ") != wantRule {
		t.Errorf("rules %+v, want FORWARD %s", c.Rules, wantRule)
	}
}

func TestPlanLinkNamesFit(t *testing.T) {
	c, err := plan("a-name-of-the-longest-length-32c", MaxHosts, netip.MustParsePrefix("172.30.0.0/24"), "/s")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{c.Bridge, c.Hosts[MaxHosts-1].VethHost, c.Hosts[MaxHosts-1].WGIface} {
		if len(n) > 15 {
			t.Errorf("link name %q is longer than 15 bytes", n)
		}
	}
}

func TestPlanRefuses(t *testing.T) {
	sub := netip.MustParsePrefix("172.30.1.0/24")
	for _, tc := range []struct {
		name     string
		harness  string
		hosts    int
		subnet   netip.Prefix
		stateDir string
		want     string
	}{
		{"empty name", "", 3, sub, "/s", "want 1 to 32"},
		{"upper case", "Kat", 3, sub, "/s", "want 1 to 32"},
		{"slash", "a/b", 3, sub, "/s", "want 1 to 32"},
		{"too long", strings.Repeat("a", 33), 3, sub, "/s", "want 1 to 32"},
		{"no hosts", "kat", 0, sub, "/s", "0 hosts"},
		{"too many hosts", "kat", MaxHosts + 1, sub, "/s", "hosts, want 1 to"},
		{"ipv6", "kat", 3, netip.MustParsePrefix("fd00::/64"), "/s", "not an IPv4 prefix"},
		{"subnet too small", "kat", 3, netip.MustParsePrefix("172.30.1.0/30"), "/s", "too few"},
		{"no state dir", "kat", 3, sub, "", "no state directory"},
		{"run root too long for Podman", "kat", 10, sub, "/" + strings.Repeat("s", 34), "longer than the 50 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan(tc.harness, tc.hosts, tc.subnet, tc.stateDir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("plan: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestChooseSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("172.30.0.0/16")
	first, err := chooseSubnet(pool, "kat", nil)
	if err != nil {
		t.Fatal(err)
	}
	next := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 30, first.Addr().As4()[2] + 1, 0}), 24)
	for _, tc := range []struct {
		name string
		used []string
		want string
	}{
		{"nothing used", nil, first.String()},
		{"own candidate taken by a route", []string{first.String()}, next.String()},
		{"own candidate holds an address", []string{netip.PrefixFrom(first.Addr().Next(), 32).String()}, next.String()},
		{"a wider route covers it", []string{first.Addr().String() + "/23", next.Addr().String() + "/23"}, ""},
		{"unrelated routes", []string{"10.88.0.0/16", "192.0.2.0/24"}, first.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var used []netip.Prefix
			for _, u := range tc.used {
				used = append(used, netip.MustParsePrefix(u).Masked())
			}
			got, err := chooseSubnet(pool, "kat", used)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != "" && got.String() != tc.want {
				t.Errorf("chose %v, want %v", got, tc.want)
			}
			if overlapsAny(got, used) {
				t.Errorf("chose %v, which overlaps %v", got, used)
			}
		})
	}
	if _, err := chooseSubnet(netip.MustParsePrefix("172.30.0.0/23"), "kat", []netip.Prefix{netip.MustParsePrefix("172.30.0.0/22")}); err == nil {
		t.Error("chooseSubnet found a subnet in a pool that a route covers")
	}
	a, _ := chooseSubnet(pool, "kat-a", nil)
	b, _ := chooseSubnet(pool, "kat-b", nil)
	if a == b {
		t.Errorf("harnesses kat-a and kat-b start at the same subnet %v; pick other names for this test", a)
	}
}

func TestParseRoutesAndAddrs(t *testing.T) {
	routes, err := parseRoutes(`default via 192.0.2.1 dev eth0
10.88.0.0/16 dev podman0 proto kernel scope link src 10.88.0.1
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
local 10.88.0.1 dev podman0 table local proto kernel scope host src 10.88.0.1
broadcast 10.88.255.255 dev podman0 table local proto kernel scope link src 10.88.0.1
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1
unreachable 198.51.100.0/24
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.88.0.0/16", "192.0.2.0/24", "10.88.0.1/32", "10.88.255.255/32", "127.0.0.0/8", "198.51.100.0/24"}
	if got := strs(routes); !slices.Equal(got, want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	addrs, err := parseAddrs(`1: lo    inet 127.0.0.1/8 scope host lo\       valid_lft forever preferred_lft forever
4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\       valid_lft forever preferred_lft forever
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strs(addrs); !slices.Equal(got, []string{"127.0.0.0/8", "192.0.2.0/24"}) {
		t.Errorf("addrs %v", got)
	}
	if _, err := parseRoutes("nonsense dev eth0\n"); err == nil {
		t.Error("parseRoutes accepted a line without a prefix")
	}
}

func strs(ps []netip.Prefix) []string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return s
}
