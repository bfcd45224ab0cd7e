package leader

import (
	"net/netip"
	"time"

	"kat.dws.rip/kat/netstack/ipam"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// addressCooldown is how long a released address is handed out only when
// its subnet has no other free: longer than the agents' DNS answers are
// cached, so a name of an instance gone does not reach its successor. The
// leader keeps release times in memory: a new term starts without them.
const addressCooldown = time.Minute

// Sources of an address hold (addressHolds' bits): an address is held while
// an assignment carries it or its IPAMKey exists. Both are written in one
// transaction, but the two caches follow etcd apart.
const (
	heldByAssignment uint8 = 1 << iota
	heldByKey
)

// addressHolds is, by node, who holds each address, and when the addresses
// no longer held were released. Guarded by viewIndex.mu.
type addressHolds struct {
	held     map[string]map[netip.Addr]uint8
	released map[string]map[netip.Addr]time.Time
}

func newAddressHolds() addressHolds {
	return addressHolds{held: map[string]map[netip.Addr]uint8{}, released: map[string]map[netip.Addr]time.Time{}}
}

// set adds (on) or removes source's hold on ip of node; an address no
// longer held is released at now.
func (h *addressHolds) set(node string, ip netip.Addr, source uint8, on bool, now time.Time) {
	m := h.held[node]
	if m == nil {
		if !on {
			return
		}
		m = map[netip.Addr]uint8{}
		h.held[node] = m
	}
	was := m[ip]
	if on {
		m[ip] = was | source
		if r := h.released[node]; r != nil {
			delete(r, ip)
		}
		return
	}
	if was&^source != 0 {
		m[ip] = was &^ source
		return
	}
	delete(m, ip)
	if len(m) == 0 {
		delete(h.held, node)
	}
	if was == 0 {
		return
	}
	r := h.released[node]
	if r == nil {
		r = map[netip.Addr]time.Time{}
		h.released[node] = r
	}
	r[ip] = now
}

// of returns the addresses held on node, and those released within
// addressCooldown before now (forgetting older releases).
func (h *addressHolds) of(node string, now time.Time) (held, cooling []netip.Addr) {
	for ip := range h.held[node] {
		held = append(held, ip)
	}
	for ip, at := range h.released[node] {
		if now.Sub(at) < addressCooldown {
			cooling = append(cooling, ip)
		} else {
			delete(h.released[node], ip)
		}
	}
	return held, cooling
}

// count returns how many instance addresses of subnet are held on node.
func (h *addressHolds) count(node string, subnet netip.Prefix) int {
	n := 0
	for ip := range h.held[node] {
		if ipam.InstanceAddress(subnet, ip) {
			n++
		}
	}
	return n
}

// ipamChanged is the /kat/ipam cache's hook.
func (v *view) ipamChanged(key string, _, new *string) {
	node, ip, ok := resources.ParseIPAMKey(key)
	if !ok {
		return
	}
	v.idx.mu.Lock()
	v.idx.addrs.set(node, ip, heldByKey, new != nil, v.now())
	v.idx.mu.Unlock()
}

// heldIPs is AssignInput.HeldIPs over the view.
func (v *view) heldIPs(node string) (held, cooling []netip.Addr) {
	v.idx.mu.Lock()
	defer v.idx.mu.Unlock()
	return v.idx.addrs.of(node, v.now())
}

// applySubnets sets each node's Subnet and FreeIPs from the subnets cache
// and the held addresses; once any node has a subnet (the overlay is on),
// a node without one awaits it (NoSubnet). Called with idx.mu held.
func (v *view) applySubnets(nodes []sched.Node) {
	if v.subnets.Len() == 0 {
		return // a cluster without the overlay: instances get no address
	}
	for i := range nodes {
		n := &nodes[i]
		sub, ok := v.subnets.Get(resources.NodeSubnetKey(n.Name))
		if !ok {
			n.NoSubnet = true
			continue
		}
		n.Subnet = sub
		n.FreeIPs = max(0, ipam.Usable(sub)-v.idx.addrs.count(n.Name, sub))
	}
}
