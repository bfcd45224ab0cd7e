package runtime

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// forgetFlows deletes the node's connection-tracking entries of the flows
// answered from addrs, the addresses of a container just removed, and
// returns how many it deleted.
//
// Netavark takes a container's interface down before its port forwarding
// (DNAT) rules, so a connection to a published port that comes in between
// is forwarded to the address that is gone, and connection tracking binds
// that connection to it: the client's retries of its SYN follow the same
// entry, even once another container forwards the port, until the client
// gives up or the entry expires (minutes). Deleted, the entry is looked up
// afresh at the next retry.
func forgetFlows(addrs []netip.Addr) (int, error) {
	var errs []error
	total := 0
	for _, a := range addrs {
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(netlink.ConntrackReplySrcIP, net.IP(a.AsSlice())); err != nil {
			errs = append(errs, fmt.Errorf("flows answered from %s: %w", a, err))
			continue
		}
		family := netlink.InetFamily(unix.AF_INET)
		if a.Is6() {
			family = netlink.InetFamily(unix.AF_INET6)
		}
		n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
		total += int(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete the tracked flows answered from %s: %w", a, err))
		}
	}
	return total, errors.Join(errs...)
}
