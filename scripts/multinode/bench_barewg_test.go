package multinode

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/scripts/harness"
)

// bareWGEnv makes the test binary, run by bareWireGuard inside a host's
// network namespace, the bare wireguard-go device of the overlay
// benchmark's floor instead of the tests (see TestMain).
const bareWGEnv = "KAT_BARE_WG"

// bareWGIface, bareWGPort and bareWGNet are the floor's interface (its name
// in each namespace), UDP port and addresses: apart from KAT's.
const (
	bareWGIface = "wgbare0"
	bareWGPort  = 51999
)

var bareWGNet = netip.MustParsePrefix("10.253.0.0/24")

// bareWGDevice is one end of the floor: wireguard-go's own device on a TUN
// interface, as its example program sets one up, and nothing of KAT.
type bareWGDevice struct {
	Private, Peer wgtypes.Key
	Addr          netip.Prefix
	Endpoint      netip.AddrPort
	PeerAddr      netip.Addr
	MTU           int
}

// env is the device's configuration for the process that runs it.
func (d bareWGDevice) env() []string {
	return []string{bareWGEnv + "=1", "BARE_WG_PRIVATE=" + hex.EncodeToString(d.Private[:]), "BARE_WG_PEER=" + hex.EncodeToString(d.Peer[:]),
		"BARE_WG_ADDR=" + d.Addr.String(), "BARE_WG_ENDPOINT=" + d.Endpoint.String(), "BARE_WG_PEER_ADDR=" + d.PeerAddr.String(),
		"BARE_WG_MTU=" + strconv.Itoa(d.MTU)}
}

// bareWireGuardMain runs the device its environment describes until stdin
// closes or a signal comes, printing "ready" once the interface is up.
func bareWireGuardMain() error {
	mtu, err := strconv.Atoi(os.Getenv("BARE_WG_MTU"))
	if err != nil {
		return fmt.Errorf("BARE_WG_MTU: %w", err)
	}
	addr, err := netip.ParsePrefix(os.Getenv("BARE_WG_ADDR"))
	if err != nil {
		return fmt.Errorf("BARE_WG_ADDR: %w", err)
	}
	tdev, err := tun.CreateTUN(bareWGIface, mtu)
	if err != nil {
		return fmt.Errorf("create TUN %s: %w", bareWGIface, err)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, "bare-wg: "))
	defer dev.Close()
	cfg := fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nendpoint=%s\nallowed_ip=%s/32\n",
		os.Getenv("BARE_WG_PRIVATE"), bareWGPort, os.Getenv("BARE_WG_PEER"), os.Getenv("BARE_WG_ENDPOINT"), os.Getenv("BARE_WG_PEER_ADDR"))
	if err := dev.IpcSet(cfg); err != nil {
		return fmt.Errorf("configure the device: %w", err)
	}
	if err := dev.Up(); err != nil {
		return fmt.Errorf("bring the device up: %w", err)
	}
	link, err := netlink.LinkByName(bareWGIface)
	if err != nil {
		return fmt.Errorf("find %s: %w", bareWGIface, err)
	}
	nlAddr, err := netlink.ParseAddr(addr.String())
	if err != nil {
		return fmt.Errorf("parse %s: %w", addr, err)
	}
	if err := netlink.AddrAdd(link, nlAddr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", bareWGIface, err)
	}
	fmt.Println("ready")
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(closed)
	}()
	select {
	case <-stop:
	case <-closed:
	}
	return nil
}

// startBareWireGuard runs the floor's two devices, one in each of a and b
// (their underlay addresses the endpoints, the MTU of KAT's overlay
// interface), and returns b's address on it as seen from a's side: a's
// peer. The devices end with the benchmark.
func startBareWireGuard(b *testing.B, a, bh harness.Host, mtu int) (aAddr, bAddr netip.Addr) {
	b.Helper()
	ka, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		b.Fatal(err)
	}
	kb, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		b.Fatal(err)
	}
	aAddr = bareWGNet.Addr().Next()
	bAddr = aAddr.Next()
	ends := []struct {
		host harness.Host
		dev  bareWGDevice
	}{
		{a, bareWGDevice{Private: ka, Peer: kb.PublicKey(), Addr: netip.PrefixFrom(aAddr, bareWGNet.Bits()),
			Endpoint: netip.AddrPortFrom(bh.Addr, bareWGPort), PeerAddr: bAddr, MTU: mtu}},
		{bh, bareWGDevice{Private: kb, Peer: ka.PublicKey(), Addr: netip.PrefixFrom(bAddr, bareWGNet.Bits()),
			Endpoint: netip.AddrPortFrom(a.Addr, bareWGPort), PeerAddr: aAddr, MTU: mtu}},
	}
	for _, e := range ends {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := e.host.Command(ctx, os.Args[0])
		cmd.Env = append(cmd.Env, e.dev.env()...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = stdin.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				cancel()
				<-done
			}
			cancel()
		})
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			b.Fatalf("bare wireguard-go in %s: %q, %v", e.host.Name, line, err)
		}
	}
	return aAddr, bAddr
}

// interfaceMTU reads the MTU of iface inside h (with ip: /sys shows the
// machine's namespace).
func interfaceMTU(b *testing.B, h harness.Host, iface string) int {
	b.Helper()
	out, err := h.Command(b.Context(), "ip", "-o", "link", "show", "dev", iface).Output()
	if err != nil {
		b.Fatalf("MTU of %s in %s: %v", iface, h.Name, err)
	}
	f := strings.Fields(string(out))
	for i := range len(f) - 1 {
		if f[i] == "mtu" {
			if mtu, err := strconv.Atoi(f[i+1]); err == nil {
				return mtu
			}
		}
	}
	b.Fatalf("MTU of %s in %s: no mtu in %q", iface, h.Name, out)
	return 0
}
