package netstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Sync makes the device match p: the key and port (in case something else
// changed them), this node's address as the interface's only one (a /32),
// one peer per p.Peers and no other, and a route through the interface, from
// the address, to each peer's subnet and to nothing else. It changes only
// what differs, so it may run on every wake-up. A peer whose endpoint does
// not resolve is left out this time and named in the error; the rest is
// applied.
func (d *Device) Sync(p Plan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.wg == nil {
		return errors.New("netstack: sync a closed device")
	}
	name := d.cfg.Interface
	var errs []error
	want := make([]resolvedPeer, 0, len(p.Peers))
	for _, peer := range p.Peers {
		addr, err := net.ResolveUDPAddr("udp", peer.Endpoint)
		if err != nil {
			errs = append(errs, fmt.Errorf("resolve the endpoint %s of node %s: %w", peer.Endpoint, peer.Node, err))
			continue
		}
		want = append(want, resolvedPeer{Peer: peer, addr: addr})
	}
	dev, err := d.wg.Device(name)
	if err != nil {
		return fmt.Errorf("netstack: read the WireGuard device %s: %w", name, err)
	}
	d.nodes = make(map[wgtypes.Key]string, len(p.Peers))
	for _, peer := range p.Peers {
		d.nodes[peer.PublicKey] = peer.Node
	}
	cfg := wgtypes.Config{Peers: peerChanges(dev.Peers, want)}
	if dev.PrivateKey != d.cfg.PrivateKey {
		cfg.PrivateKey = &d.cfg.PrivateKey
	}
	if dev.ListenPort != d.cfg.Port {
		cfg.ListenPort = &d.cfg.Port
	}
	if len(cfg.Peers) > 0 || cfg.PrivateKey != nil || cfg.ListenPort != nil {
		if err := d.wg.ConfigureDevice(name, cfg); err != nil {
			return fmt.Errorf("netstack: configure the peers of %s: %w", name, err)
		}
		for _, pc := range cfg.Peers {
			ev := d.log.Info().Str("peer_key", pc.PublicKey.String())
			if pc.Remove {
				ev.Msg("removed a WireGuard peer")
				continue
			}
			for _, w := range want {
				if w.PublicKey == pc.PublicKey {
					ev = ev.Str("peer", w.Node).Str("endpoint", w.Endpoint).Str("subnet", w.Subnet.String())
				}
			}
			ev.Msg("set a WireGuard peer")
		}
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netstack: find interface %s: %w", name, err)
	}
	if err := d.syncAddress(link, p.Address); err != nil {
		return err
	}
	routes := make([]netip.Prefix, 0, len(want))
	if p.Address.IsValid() {
		for _, w := range want {
			routes = append(routes, w.Subnet)
		}
	}
	if err := d.syncRoutes(link, p.Address, routes); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// syncAddress makes addr/32 the link's only IPv4 address (none when addr is
// invalid).
func (d *Device) syncAddress(link netlink.Link, addr netip.Addr) error {
	have, err := listRetry(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("netstack: list the addresses of %s: %w", link.Attrs().Name, err)
	}
	found := false
	for _, a := range have {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if ip.Unmap() == addr && ones == 32 {
			found = true
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("netstack: remove address %s from %s: %w", a.IPNet, link.Attrs().Name, err)
		}
	}
	if found || !addr.IsValid() {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrReplace(link, a); err != nil {
		return fmt.Errorf("netstack: add address %s to %s: %w", addr, link.Attrs().Name, err)
	}
	d.log.Info().Str("address", addr.String()).Msg("set the overlay address")
	return nil
}

// syncRoutes replaces a route to each of want through link, from src, and
// deletes the link's other routes (the kernel's own, which come from its
// addresses, aside).
func (d *Device) syncRoutes(link netlink.Link, src netip.Addr, want []netip.Prefix) error {
	name := link.Attrs().Name
	filter := &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN}
	have, err := listRetry(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return fmt.Errorf("netstack: list the routes of %s: %w", name, err)
	}
	var havePrefixes []netip.Prefix
	current := map[netip.Prefix]netlink.Route{}
	for _, r := range have {
		if r.Dst == nil || r.Protocol == unix.RTPROT_KERNEL {
			continue
		}
		p, ok := prefixOf(r.Dst)
		if !ok {
			continue
		}
		havePrefixes = append(havePrefixes, p)
		current[p] = r
	}
	for _, p := range routeDiff(havePrefixes, want) {
		r := current[p]
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("netstack: delete the route to %s through %s: %w", p, name, err)
		}
		d.log.Info().Str("subnet", p.String()).Msg("deleted the route to a node that left")
	}
	for _, p := range want {
		if r, ok := current[p]; ok && r.Scope == netlink.SCOPE_LINK && r.Src != nil && r.Src.Equal(src.AsSlice()) {
			continue
		}
		r := &netlink.Route{
			LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK, Src: src.AsSlice(), Table: unix.RT_TABLE_MAIN,
			Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)},
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("netstack: route %s through %s: %w", p, name, err)
		}
		d.log.Info().Str("subnet", p.String()).Msg("routed a node's subnet through the overlay")
	}
	return nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(ip.Unmap(), ones).Masked(), true
}

// listRetry retries a netlink dump that was interrupted by a concurrent
// change (netlink.ErrDumpInterrupted comes with partial results).
func listRetry[T any](list func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for range 5 {
		out, err = list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

// PeerStatus is one peer as the device sees it.
type PeerStatus struct {
	// Node is the peer's node, as the last Sync named it; "" for a peer
	// no Sync set.
	Node      string
	PublicKey wgtypes.Key
	// Endpoint is the peer's current host:port ("" before any).
	Endpoint string
	// LastHandshake is the last completed handshake; zero for none.
	LastHandshake time.Time
	// RxBytes and TxBytes count what the device received from and sent to
	// the peer.
	RxBytes, TxBytes int64
}

// Peers reads the device's peers (one wgctrl call, through the kernel or
// the userspace device's UAPI socket), in the device's order.
func (d *Device) Peers() ([]PeerStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.wg == nil {
		return nil, errors.New("netstack: read the peers of a closed device")
	}
	dev, err := d.wg.Device(d.cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("netstack: read the WireGuard device %s: %w", d.cfg.Interface, err)
	}
	out := make([]PeerStatus, 0, len(dev.Peers))
	for _, p := range dev.Peers {
		ps := PeerStatus{Node: d.nodes[p.PublicKey], PublicKey: p.PublicKey, LastHandshake: p.LastHandshakeTime,
			RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes}
		if p.Endpoint != nil {
			ps.Endpoint = p.Endpoint.String()
		}
		if ps.LastHandshake.Unix() <= 0 {
			ps.LastHandshake = time.Time{} // wgctrl's "never" is the Unix epoch
		}
		out = append(out, ps)
	}
	return out, nil
}
