package netstack

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
)

// Mode chooses the WireGuard implementation Open uses.
type Mode string

// The modes of Open.
const (
	// ModeAuto uses the kernel module when it is there, else the
	// embedded userspace device. The default.
	ModeAuto Mode = "auto"
	// ModeKernel insists on the kernel module.
	ModeKernel Mode = "kernel"
	// ModeUserspace always runs the embedded userspace device.
	ModeUserspace Mode = "userspace"
	// ModeOff opens no device: the node is not part of the overlay (for
	// tests that run several agents in one network namespace). Open
	// refuses it; callers check it first.
	ModeOff Mode = "off"
)

// ParseMode returns the mode s names; "" is ModeAuto.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeAuto, nil
	case ModeAuto, ModeKernel, ModeUserspace, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("%q is not one of auto, kernel, userspace, off", s)
}

// Defaults of the overlay.
const (
	// DefaultInterface is the WireGuard interface's name.
	DefaultInterface = "kat0"
	// DefaultPort is the UDP port WireGuard listens on.
	DefaultPort = 51820
	// DefaultMTU is the interface's MTU when the underlay's is unknown:
	// a 1500-byte underlay less WireGuard's 80 bytes.
	DefaultMTU = 1420
	// Overhead is what WireGuard adds to a packet over IPv6 (IPv4 needs
	// 60): the interface's MTU is the underlay's less this.
	Overhead = 80
	// KeepaliveInterval keeps NAT mappings open between peers
	// (WireGuard's PersistentKeepalive).
	KeepaliveInterval = 25 * time.Second
)

// InterfaceNameProblem says what is wrong with name as a network interface
// name (Linux accepts 1 to 15 bytes, no '/', ':' or white space), or "".
func InterfaceNameProblem(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > 15:
		return fmt.Sprintf("%q is %d bytes, Linux allows at most 15", name, len(name))
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not a usable interface name", name)
	case strings.ContainsAny(name, "/: \t\n\r\x00"):
		return fmt.Sprintf("%q must not contain '/', ':' or white space", name)
	}
	return ""
}

// OverlayMTU is the interface MTU for an underlay of MTU underlay: the
// underlay's less Overhead, DefaultMTU when the underlay is unknown (0), and
// never below IPv4's 576.
func OverlayMTU(underlay int) int {
	if underlay <= 0 {
		return DefaultMTU
	}
	return max(underlay-Overhead, 576)
}

// Peer is another node as the device must know it.
type Peer struct {
	Node      string
	PublicKey wgtypes.Key
	// Endpoint is host:port of the node's WireGuard device.
	Endpoint string
	// Subnet is the node's subnet: its AllowedIPs and its route.
	Subnet netip.Prefix
}

// Plan is the desired state of the device, computed from the cluster's
// overlay records by PlanFor.
type Plan struct {
	// Address is this node's overlay address; invalid while the node has
	// no subnet yet (then no route is set either).
	Address netip.Addr
	// Subnet is this node's subnet.
	Subnet netip.Prefix
	// Peers are the other nodes, sorted by node.
	Peers []Peer
	// Skipped says, per node that is not a peer, why not.
	Skipped map[string]string
}

// PlanFor computes the plan of node self from every node's overlay record:
// self's address, and one peer per other node with a valid key, endpoint
// and subnet that overlaps neither self's subnet nor an earlier peer's.
func PlanFor(self string, nodes []api.NodeNetwork) Plan {
	p := Plan{Skipped: map[string]string{}}
	for _, n := range nodes {
		if n.Node == self && n.Subnet.IsValid() {
			p.Subnet = n.Subnet.Masked()
			p.Address = n.OverlayIP()
		}
	}
	var keys []wgtypes.Key
	for _, n := range nodes {
		if n.Node == self {
			continue
		}
		peer, problem := peerOf(n)
		switch {
		case problem != "":
		case p.Subnet.IsValid() && p.Subnet.Overlaps(peer.Subnet):
			problem = fmt.Sprintf("its subnet %s overlaps this node's %s", peer.Subnet, p.Subnet)
		case slices.Contains(keys, peer.PublicKey):
			problem = "another node has the same public key"
		default:
			for _, q := range p.Peers {
				if q.Subnet.Overlaps(peer.Subnet) {
					problem = fmt.Sprintf("its subnet %s overlaps node %s's %s", peer.Subnet, q.Node, q.Subnet)
					break
				}
			}
		}
		if problem != "" {
			p.Skipped[n.Node] = problem
			continue
		}
		keys = append(keys, peer.PublicKey)
		p.Peers = append(p.Peers, peer)
	}
	slices.SortFunc(p.Peers, func(a, b Peer) int { return strings.Compare(a.Node, b.Node) })
	return p
}

// peerOf checks one node's record; the problem is "" when it makes a peer.
func peerOf(n api.NodeNetwork) (Peer, string) {
	if !n.Subnet.IsValid() {
		return Peer{}, "no subnet yet"
	}
	if n.PublicKey == "" {
		return Peer{}, "no public key yet"
	}
	key, err := wgtypes.ParseKey(n.PublicKey)
	if err != nil {
		return Peer{}, fmt.Sprintf("public key: %v", err)
	}
	if n.Endpoint == "" {
		return Peer{}, "no endpoint yet"
	}
	host, port, err := net.SplitHostPort(n.Endpoint)
	if err != nil || host == "" {
		return Peer{}, fmt.Sprintf("endpoint %q is not host:port", n.Endpoint)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return Peer{}, fmt.Sprintf("endpoint %q: %q is not a port", n.Endpoint, port)
	}
	return Peer{Node: n.Node, PublicKey: key, Endpoint: n.Endpoint, Subnet: n.Subnet.Masked()}, ""
}

// resolvedPeer is a Peer whose endpoint was resolved to an address.
type resolvedPeer struct {
	Peer
	addr *net.UDPAddr
}

// peerChanges returns the wgctrl peer configs that turn the device's peers
// have into want: a config for every wanted peer that is missing or differs
// (endpoint, allowed IPs, keepalive), and a removal for every peer not
// wanted. Nothing when they agree.
func peerChanges(have []wgtypes.Peer, want []resolvedPeer) []wgtypes.PeerConfig {
	var out []wgtypes.PeerConfig
	byKey := map[wgtypes.Key]wgtypes.Peer{}
	for _, h := range have {
		byKey[h.PublicKey] = h
	}
	wanted := map[wgtypes.Key]bool{}
	keepalive := KeepaliveInterval
	for _, w := range want {
		wanted[w.PublicKey] = true
		allowed := net.IPNet{IP: w.Subnet.Addr().AsSlice(), Mask: net.CIDRMask(w.Subnet.Bits(), w.Subnet.Addr().BitLen())}
		if h, ok := byKey[w.PublicKey]; ok && sameUDPAddr(h.Endpoint, w.addr) && h.PersistentKeepaliveInterval == keepalive &&
			len(h.AllowedIPs) == 1 && h.AllowedIPs[0].IP.Equal(allowed.IP) && bytes.Equal(h.AllowedIPs[0].Mask, allowed.Mask) {
			continue
		}
		out = append(out, wgtypes.PeerConfig{
			PublicKey: w.PublicKey, Endpoint: w.addr, PersistentKeepaliveInterval: &keepalive,
			ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{allowed},
		})
	}
	for _, h := range have {
		if !wanted[h.PublicKey] {
			out = append(out, wgtypes.PeerConfig{PublicKey: h.PublicKey, Remove: true})
		}
	}
	return out
}

func sameUDPAddr(a, b *net.UDPAddr) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.IP.Equal(b.IP) && a.Port == b.Port
}

// routeDiff returns the routes to delete: those of have (the interface's
// routes) that want does not hold.
func routeDiff(have, want []netip.Prefix) (del []netip.Prefix) {
	for _, h := range have {
		if !slices.Contains(want, h.Masked()) {
			del = append(del, h)
		}
	}
	return del
}
