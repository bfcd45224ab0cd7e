package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// ErrSubnetFull means a node subnet has no address left for an instance.
var ErrSubnetFull = errors.New("ipam: node subnet full")

// Pool hands out the instance addresses of one IPv4 node subnet: the lowest
// address no instance holds, skipping the reserved ones (the network
// address, the node's own first address and the broadcast address).
// Addresses released lately come last: one is handed out again only when no
// other is free, so a name or connection still pointing at an instance that
// just went does not reach its successor. A Pool is not safe for concurrent
// use; the leader makes one per node and placement pass.
type Pool struct {
	subnet netip.Prefix
	// first and last bound the instance addresses.
	first, last netip.Addr
	held        map[netip.Addr]bool
	// cooling are free addresses released lately, handed out last.
	cooling map[netip.Addr]bool
	// next is the lowest address that may be free and not cooling: every
	// address below it is held or cooling.
	next netip.Addr
	free int
}

// Usable returns how many instance addresses an IPv4 subnet has: all but
// its network, first and broadcast addresses; 0 for a subnet smaller than
// /30 or not IPv4.
func Usable(subnet netip.Prefix) int {
	if !subnet.Addr().Is4() || subnet.Bits() > 30 || subnet.Bits() < 0 {
		return 0
	}
	return 1<<(32-subnet.Bits()) - 3
}

// InstanceAddress reports whether ip is an address of subnet an instance
// may hold: inside it and none of the reserved ones.
func InstanceAddress(subnet netip.Prefix, ip netip.Addr) bool {
	first, last, ok := instanceRange(subnet)
	return ok && ip.Is4() && first.Compare(ip) <= 0 && ip.Compare(last) <= 0
}

// instanceRange returns the first and last instance address of subnet.
func instanceRange(subnet netip.Prefix) (first, last netip.Addr, ok bool) {
	if Usable(subnet) <= 0 {
		return netip.Addr{}, netip.Addr{}, false
	}
	p := subnet.Masked()
	b := p.Addr().As4()
	n := binary.BigEndian.Uint32(b[:])
	n |= 1<<(32-p.Bits()) - 1 // broadcast
	n--                       // the last instance address
	binary.BigEndian.PutUint32(b[:], n)
	return p.Addr().Next().Next(), netip.AddrFrom4(b), true
}

// NewPool returns the pool of subnet with held already taken. cooling are
// free addresses released lately: handed out only when no other is free.
// Addresses of held or cooling outside the instance range are ignored.
// A subnet that is not IPv4 or smaller than /30 is an error naming it.
func NewPool(subnet netip.Prefix, held, cooling []netip.Addr) (*Pool, error) {
	first, last, ok := instanceRange(subnet)
	if !ok {
		return nil, fmt.Errorf("node subnet %s: not an IPv4 subnet of at least 4 addresses (/30)", subnet)
	}
	p := &Pool{subnet: subnet.Masked(), first: first, last: last, next: first,
		held: make(map[netip.Addr]bool, len(held)), cooling: map[netip.Addr]bool{}, free: Usable(subnet)}
	for _, ip := range held {
		if p.inRange(ip) && !p.held[ip] {
			p.held[ip] = true
			p.free--
		}
	}
	for _, ip := range cooling {
		if p.inRange(ip) && !p.held[ip] {
			p.cooling[ip] = true
		}
	}
	return p, nil
}

func (p *Pool) inRange(ip netip.Addr) bool {
	return ip.Is4() && p.first.Compare(ip) <= 0 && ip.Compare(p.last) <= 0
}

// Subnet returns the pool's subnet.
func (p *Pool) Subnet() netip.Prefix { return p.subnet }

// Free returns how many instance addresses no instance holds, cooling ones
// included.
func (p *Pool) Free() int { return p.free }

// Allocate takes the lowest free address that is not cooling, else the
// lowest cooling one, and returns it; an error wrapping ErrSubnetFull
// names the subnet when every address is held.
func (p *Pool) Allocate() (netip.Addr, error) {
	if p.free <= 0 {
		return netip.Addr{}, fmt.Errorf("%w: all %d addresses of %s are held", ErrSubnetFull, Usable(p.subnet), p.subnet)
	}
	for ip := p.next; ip.IsValid() && ip.Compare(p.last) <= 0; ip = ip.Next() {
		if !p.held[ip] && !p.cooling[ip] {
			p.next = ip.Next()
			p.take(ip)
			return ip, nil
		}
	}
	p.next = p.last.Next()
	cool := make([]netip.Addr, 0, len(p.cooling))
	for ip := range p.cooling {
		cool = append(cool, ip)
	}
	slices.SortFunc(cool, netip.Addr.Compare)
	ip := cool[0] // free > 0 and nothing else is free
	p.take(ip)
	return ip, nil
}

func (p *Pool) take(ip netip.Addr) {
	delete(p.cooling, ip)
	p.held[ip] = true
	p.free--
}

// Release frees ip, which is then cooling: handed out again only when no
// other address is free. Releasing an address the pool does not hold does
// nothing.
func (p *Pool) Release(ip netip.Addr) {
	if !p.held[ip] {
		return
	}
	delete(p.held, ip)
	p.cooling[ip] = true
	p.free++
}
