package runtime

import (
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestForgetFlows: the tracked flows answered from a removed container's
// address (a connection forwarded to it) are deleted; others stay. It runs
// in a network namespace of its own.
func TestForgetFlows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace of its own")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The thread enters a namespace of its own and is never handed
		// back: it ends with the goroutine.
		goruntime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare the network namespace: %v", err)
			return
		}
		client, node := net.IPv4(192, 0, 2, 9).To4(), net.IPv4(192, 0, 2, 1).To4()
		forwarded := func(to net.IP, sport uint16) *netlink.ConntrackFlow {
			return &netlink.ConntrackFlow{
				FamilyType: unix.AF_INET,
				Forward:    netlink.IPTuple{SrcIP: client, DstIP: node, SrcPort: sport, DstPort: 80, Protocol: unix.IPPROTO_TCP},
				Reverse:    netlink.IPTuple{SrcIP: to, DstIP: client, SrcPort: 80, DstPort: sport, Protocol: unix.IPPROTO_TCP},
				TimeOut:    100,
				ProtoInfo:  &netlink.ProtoInfoTCP{State: 1}, // SYN_SENT
			}
		}
		gone, kept := net.IPv4(10, 88, 0, 5).To4(), net.IPv4(10, 88, 0, 6).To4()
		for i, f := range []*netlink.ConntrackFlow{forwarded(gone, 40001), forwarded(gone, 40002), forwarded(kept, 40003)} {
			if err := netlink.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
				t.Errorf("create flow %d: %v", i, err)
				return
			}
		}
		n, err := forgetFlows([]netip.Addr{netip.MustParseAddr("10.88.0.5")})
		if err != nil || n != 2 {
			t.Errorf("forgetFlows: %d, %v; want the 2 flows forwarded to 10.88.0.5", n, err)
		}
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
		if err != nil {
			t.Errorf("list flows: %v", err)
			return
		}
		if len(flows) != 1 || !flows[0].Reverse.SrcIP.Equal(kept) {
			t.Errorf("flows left: %v, want the one forwarded to %s", flows, kept)
		}
	}()
	<-done
}
