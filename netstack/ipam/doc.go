// Package ipam is the arithmetic of instance addresses: which
// addresses of a node's overlay subnet an instance may hold, and which one
// a new instance gets. It is pure and links no WireGuard or netlink, so the
// leader, which hands addresses out, and the agent, which checks them, share
// it without the overlay device (package netstack).
//
// The leader gives every node a subnet of clusterCIDR
// (resources.Repo.EnsureNodeNetwork) and every instance it places an address
// of its node's subnet: [Pool] decides which, from the addresses already
// held.
//
//	pool, err := ipam.NewPool(subnet, held, recentlyReleased)
//	if err != nil { ... }
//	ip, err := pool.Allocate() // errors.Is(err, ipam.ErrSubnetFull) when none is left
//
// A node subnet's first address is the node's own (its overlay address, the
// gateway of its Podman network and where its DNS server listens); it, the
// network address and the broadcast address are never handed out
// ([InstanceAddress], [Usable]).
package ipam
