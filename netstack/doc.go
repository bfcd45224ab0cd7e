// Package netstack is KAT's node networking (spec §7): the WireGuard
// overlay, IPAM, routes and the agent DNS server.
//
// # IPAM
//
// The leader gives every node a subnet of clusterCIDR
// (resources.Repo.EnsureNodeNetwork) and every instance it places an
// address of its node's subnet: [Pool] decides which, from the addresses
// already held.
//
//	pool, err := netstack.NewPool(subnet, held, recentlyReleased)
//	if err != nil { ... }
//	ip, err := pool.Allocate() // errors.Is(err, netstack.ErrSubnetFull) when none is left
//
// A node subnet's first address is the node's own (its overlay address,
// the gateway of its Podman network and where its DNS server listens); it,
// the network address and the broadcast address are never handed out.
//
// The agent DNS server is the subpackage dnsserver.
package netstack
