package netstack

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
)

func testKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

func TestPlanFor(t *testing.T) {
	k1, k2, k3 := testKey(t), testKey(t), testKey(t)
	sub := netip.MustParsePrefix
	node := func(name, subnet string, key wgtypes.Key, endpoint string) api.NodeNetwork {
		n := api.NodeNetwork{Node: name, Endpoint: endpoint}
		if subnet != "" {
			n.Subnet = sub(subnet)
		}
		if key != (wgtypes.Key{}) {
			n.PublicKey = key.String()
		}
		return n
	}
	tests := []struct {
		name    string
		nodes   []api.NodeNetwork
		addr    string
		peers   []string // node=subnet
		skipped map[string]string
	}{
		{
			name: "every other node with a key and endpoint is a peer",
			nodes: []api.NodeNetwork{
				node("a", "10.100.0.0/23", k1, "172.30.0.2:51820"),
				node("b", "10.100.2.0/23", k2, "172.30.0.3:51820"),
				node("c", "10.100.4.0/23", k3, "c.example:51820"),
			},
			addr:  "10.100.0.1",
			peers: []string{"b=10.100.2.0/23", "c=10.100.4.0/23"},
		},
		{
			name: "nodes without key, endpoint or subnet are skipped with the reason",
			nodes: []api.NodeNetwork{
				node("a", "10.100.0.0/23", k1, "172.30.0.2:51820"),
				node("b", "10.100.2.0/23", wgtypes.Key{}, ""),
				node("c", "10.100.4.0/23", k3, ""),
				node("d", "", k2, "172.30.0.5:51820"),
				{Node: "e", Subnet: sub("10.100.8.0/23"), PublicKey: "not-a-key", Endpoint: "172.30.0.6:51820"},
				node("f", "10.100.10.0/23", k2, "172.30.0.7"),
			},
			addr: "10.100.0.1",
			skipped: map[string]string{"b": "no public key yet", "c": "no endpoint yet", "d": "no subnet yet",
				"e": "public key", "f": "is not host:port"},
		},
		{
			name: "no subnet of its own yet: no address, peers still",
			nodes: []api.NodeNetwork{
				node("b", "10.100.2.0/23", k2, "172.30.0.3:51820"),
			},
			peers: []string{"b=10.100.2.0/23"},
		},
		{
			name: "a subnet overlapping this node's or an earlier peer's, or a repeated key, is refused",
			nodes: []api.NodeNetwork{
				node("a", "10.100.0.0/23", k1, "172.30.0.2:51820"),
				node("b", "10.100.0.0/24", k2, "172.30.0.3:51820"),
				node("c", "10.100.4.0/23", k3, "172.30.0.4:51820"),
				node("d", "10.100.4.0/24", k2, "172.30.0.5:51820"),
				node("e", "10.100.8.0/23", k3, "172.30.0.6:51820"),
			},
			addr:    "10.100.0.1",
			peers:   []string{"c=10.100.4.0/23"},
			skipped: map[string]string{"b": "overlaps this node's", "d": "overlaps node c's", "e": "same public key"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanFor("a", tc.nodes)
			if got := p.Address.String(); tc.addr != "" && got != tc.addr || tc.addr == "" && p.Address.IsValid() {
				t.Errorf("address %s, want %q", got, tc.addr)
			}
			var peers []string
			for _, peer := range p.Peers {
				peers = append(peers, peer.Node+"="+peer.Subnet.String())
			}
			if !reflect.DeepEqual(peers, tc.peers) {
				t.Errorf("peers %v, want %v", peers, tc.peers)
			}
			if len(p.Skipped) != len(tc.skipped) {
				t.Errorf("skipped %v, want %v", p.Skipped, tc.skipped)
			}
			for n, want := range tc.skipped {
				if !strings.Contains(p.Skipped[n], want) {
					t.Errorf("node %s skipped for %q, want it to say %q", n, p.Skipped[n], want)
				}
			}
		})
	}
}

func TestPeerChanges(t *testing.T) {
	k1, k2, k3 := testKey(t), testKey(t), testKey(t)
	ep := func(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	ipnet := func(s string) net.IPNet {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		return *n
	}
	want := func(k wgtypes.Key, endpoint, subnet string) resolvedPeer {
		return resolvedPeer{Peer: Peer{PublicKey: k, Endpoint: endpoint, Subnet: netip.MustParsePrefix(subnet)}, addr: ep(endpoint)}
	}
	have := func(k wgtypes.Key, endpoint, subnet string) wgtypes.Peer {
		return wgtypes.Peer{PublicKey: k, Endpoint: ep(endpoint), AllowedIPs: []net.IPNet{ipnet(subnet)}, PersistentKeepaliveInterval: KeepaliveInterval}
	}
	tests := []struct {
		name    string
		have    []wgtypes.Peer
		want    []resolvedPeer
		changes []string // key-index:action
	}{
		{name: "empty device: every peer is set",
			want:    []resolvedPeer{want(k1, "192.0.2.1:51820", "10.100.0.0/23"), want(k2, "192.0.2.2:51820", "10.100.2.0/23")},
			changes: []string{"1:set", "2:set"}},
		{name: "in agreement: nothing",
			have: []wgtypes.Peer{have(k1, "192.0.2.1:51820", "10.100.0.0/23")},
			want: []resolvedPeer{want(k1, "192.0.2.1:51820", "10.100.0.0/23")}},
		{name: "a node that left is removed, a new endpoint or subnet is set",
			have: []wgtypes.Peer{have(k1, "192.0.2.1:51820", "10.100.0.0/23"), have(k2, "192.0.2.2:51820", "10.100.2.0/23"),
				have(k3, "192.0.2.3:51820", "10.100.4.0/23")},
			want:    []resolvedPeer{want(k1, "192.0.2.9:51820", "10.100.0.0/23"), want(k2, "192.0.2.2:51820", "10.100.6.0/23")},
			changes: []string{"1:set", "2:set", "3:remove"}},
	}
	index := map[wgtypes.Key]string{k1: "1", k2: "2", k3: "3"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, pc := range peerChanges(tc.have, tc.want) {
				action := "set"
				if pc.Remove {
					action = "remove"
				} else if !pc.ReplaceAllowedIPs || len(pc.AllowedIPs) != 1 || pc.Endpoint == nil || pc.PersistentKeepaliveInterval == nil {
					t.Errorf("peer %s: config %+v does not replace allowed IPs with one subnet, endpoint and keepalive", index[pc.PublicKey], pc)
				}
				got = append(got, index[pc.PublicKey]+":"+action)
			}
			if !reflect.DeepEqual(got, tc.changes) {
				t.Errorf("changes %v, want %v", got, tc.changes)
			}
		})
	}
}

func TestRouteDiff(t *testing.T) {
	ps := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	got := routeDiff(ps("10.100.2.0/23", "10.100.4.0/23", "10.100.8.0/23"), ps("10.100.2.0/23", "10.100.6.0/23"))
	if want := ps("10.100.4.0/23", "10.100.8.0/23"); !reflect.DeepEqual(got, want) {
		t.Errorf("routes to delete %v, want %v", got, want)
	}
	if got := routeDiff(ps("10.100.2.0/23"), ps("10.100.2.0/23")); len(got) != 0 {
		t.Errorf("routes to delete %v, want none", got)
	}
}

func TestOverlayMTU(t *testing.T) {
	for underlay, want := range map[int]int{0: 1420, 1500: 1420, 1400: 1320, 9000: 8920, 600: 576} {
		if got := OverlayMTU(underlay); got != want {
			t.Errorf("OverlayMTU(%d) = %d, want %d", underlay, got, want)
		}
	}
}

func TestInterfaceNameAndMode(t *testing.T) {
	for name, want := range map[string]string{
		"kat0": "", "kw-1a2b3c4d-12": "", "": "must not be empty", "kat-overlay-0001": "at most 15",
		"a/b": "must not contain", "a b": "must not contain", "..": "not a usable",
	} {
		got := InterfaceNameProblem(name)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("InterfaceNameProblem(%q) = %q, want %q", name, got, want)
		}
	}
	for s, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "kernel": ModeKernel, "userspace": ModeUserspace, "off": ModeOff} {
		if got, err := ParseMode(s); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", s, got, err, want)
		}
	}
	if _, err := ParseMode("fast"); err == nil || !strings.Contains(err.Error(), "auto, kernel, userspace, off") {
		t.Errorf("ParseMode(fast) = %v, want an error listing the modes", err)
	}
}
