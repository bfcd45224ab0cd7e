// Package netstack is KAT's node networking (docs/architecture.md "Overlay"):
// the overlay network and, in its subpackages, IPAM (ipam) and the agent DNS
// server (dnsserver). The overlay is a WireGuard interface that connects this
// node to every other node of the cluster, so that containers and agents
// reach each other across hosts by their overlay addresses.
//
// Each node holds a subnet of the cluster's clusterCIDR (the leader hands it
// out, see resources.EnsureNodeNetwork) and a WireGuard key pair whose
// private half never leaves the node ([LoadOrCreateKey]). The node's overlay
// address ([api.NodeNetwork.OverlayIP], the first address of its
// subnet) sits as a /32 on the interface, so services such as the agent's DNS
// server can bind it before any container runs. Every other node with a key
// and an endpoint is a peer whose AllowedIPs is its subnet, and each peer
// subnet gets a route through the interface with the overlay address as
// source. The whole clusterCIDR is never routed: netavark refuses a Podman
// network that overlaps a route, and the node's own subnet is its Podman
// network's.
//
//	dev, err := netstack.Open(netstack.Config{Interface: "kat0", Port: 51820, PrivateKey: key, Underlay: advertiseIP})
//	// ...
//	err = dev.Sync(netstack.PlanFor("node1", nodes)) // on every change of /kat/network/nodes/ and periodically
//	// ...
//	dev.Close()
//
// # Kernel or userspace
//
// [Open] drives the kernel's WireGuard (a netlink "wireguard" link) when the
// module is there, and otherwise runs an embedded userspace device
// (golang.zx2c4.com/wireguard: a TUN interface and a UAPI socket at
// /var/run/wireguard/IFACE.sock). Both are configured through wgctrl, which
// finds either. A program that calls [DeviceMain] first thing in main
// (kat-agent does) runs each userspace device in a child process of its own
// executable, which dies with it: the device's packets then never wait on
// the collection of the parent's heap (a leader's etcd and caches); others
// run it in their own process. [ModeAuto] tries the kernel first and falls back;
// [ModeKernel] and [ModeUserspace] insist on one. The UAPI socket's
// directory is shared by all network namespaces of a machine, so two nodes
// on one machine need different interface names.
//
// # Applying state
//
// [Device.Sync] is idempotent: it computes the difference between the
// device's peers, address and routes and the [Plan] it is given, and changes
// only what differs (peers that left are removed, their routes deleted), so
// it may be called on every wake-up. A userspace device dies with its
// process and is recreated by the next Open; a kernel device outlives the
// process and is reconciled in place. Close removes the UAPI socket; a stale
// socket left by a killed process is replaced by the next Open.
//
// # IPAM
//
// The addresses of instances in a node's subnet are handed out by package
// [kat.dws.rip/kat/netstack/ipam], which links none of this package's
// WireGuard and netlink, so that the leader can import it.
package netstack
