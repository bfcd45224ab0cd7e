package netstack

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/testenv"
)

// inNetnsEnv marks the copy of the test binary that runs in its own network
// namespace.
const inNetnsEnv = "KAT_NETSTACK_IN_NETNS"

// TestMain makes the test binary the runner of its userspace devices, as
// kat-agent is (DeviceMain).
func TestMain(m *testing.M) {
	DeviceMain()
	os.Exit(m.Run())
}

// TestDeviceInNetns opens a userspace device in a network namespace of its
// own (the test binary runs again under unshare --net, so nothing touches
// the machine's interfaces), then checks Open, Sync and Close against the
// kernel's and the device's state: see testDevice. It does so with the
// device in a process of its own, as kat-agent runs it, and in the test's
// process, as a program that does not call DeviceMain runs it.
func TestDeviceInNetns(t *testing.T) {
	if os.Getenv(inNetnsEnv) != "" {
		t.Run("own process", func(t *testing.T) {
			testDevice(t)
			if !ownProcess.Load() {
				t.Error("DeviceMain did not make devices run in their own process")
			}
		})
		t.Run("this process", func(t *testing.T) {
			ownProcess.Store(false)
			defer ownProcess.Store(true)
			testDevice(t)
		})
		return
	}
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "a network namespace and a TUN device need root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		testenv.SkipOrFail(t, "no /dev/net/tun: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.SkipOrFail(t, "unshare is not installed (util-linux)")
	}
	cmd := exec.CommandContext(t.Context(), "unshare", "--net", os.Args[0], "-test.run=^TestDeviceInNetns$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("the test in its own network namespace failed: %v", err)
	}
}

// testDevice runs inside the private namespace: a userspace device (mode
// userspace, as in auto mode without the module) gets its MTU from the
// underlay, the key and port; Sync sets the address, peers and routes, then
// drops a node that left with its route; Peers reads the peers back;
// Close removes the UAPI socket; a
// stale socket is replaced by the next Open.
func testDevice(t *testing.T) {
	t.Helper()
	name := fmt.Sprintf("kt%d", os.Getpid()%1000000)
	sock := filepath.Join("/var/run/wireguard", name+".sock")
	underlay := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "under0", MTU: 1400}, PeerName: "under1"}
	if err := netlink.LinkAdd(underlay); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(underlay) })
	if err := netlink.AddrAdd(underlay, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.1"), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	// A stale socket, as a killed process leaves it.
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()

	priv, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := Open(Config{Interface: name, Port: 51999, Mode: ModeUserspace, PrivateKey: priv,
		Underlay: netip.MustParseAddr("192.0.2.1"), Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if dev.Type() != TypeUserspace || dev.MTU() != 1320 {
		t.Errorf("device type %q, MTU %d; want %q and 1400-80", dev.Type(), dev.MTU(), TypeUserspace)
	}
	if inOwn := dev.proc != nil; inOwn != ownProcess.Load() {
		t.Errorf("device in a process of its own: %v, want %v", inOwn, ownProcess.Load())
	}
	if dev.proc != nil {
		checkPriority(t, dev.proc.cmd.Process.Pid)
	}
	k2, k3 := testKey(t), testKey(t)
	nodes := []api.NodeNetwork{
		{Node: "a", Subnet: netip.MustParsePrefix("10.100.0.0/23")},
		{Node: "b", Subnet: netip.MustParsePrefix("10.100.2.0/23"), PublicKey: k2.String(), Endpoint: "192.0.2.2:51820"},
		{Node: "c", Subnet: netip.MustParsePrefix("10.100.4.0/23"), PublicKey: k3.String(), Endpoint: "192.0.2.3:51820"},
	}
	for range 2 { // the second pass changes nothing
		if err := dev.Sync(PlanFor("a", nodes)); err != nil {
			t.Fatal(err)
		}
	}
	check(t, name, priv, "10.100.0.1", []wgtypes.Key{k2, k3}, []string{"10.100.2.0/23", "10.100.4.0/23"})
	// Peers reads them back through the UAPI socket, named by node; no
	// handshake happened (the peers do not exist).
	peers, err := dev.Peers()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]PeerStatus{}
	for _, p := range peers {
		got[p.Node] = p
	}
	if len(peers) != 2 || got["b"].PublicKey != k2 || got["b"].Endpoint != "192.0.2.2:51820" || got["c"].PublicKey != k3 ||
		!got["b"].LastHandshake.IsZero() {
		t.Errorf("Peers = %+v, want b and c with their keys and endpoints, never a handshake", peers)
	}

	if err := dev.Sync(PlanFor("a", nodes[:2])); err != nil {
		t.Fatal(err)
	}
	check(t, name, priv, "10.100.0.1", []wgtypes.Key{k2}, []string{"10.100.2.0/23"})

	dev.Close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("UAPI socket %s after Close: %v, want it gone", sock, err)
	}
	if _, err := netlink.LinkByName(name); err == nil {
		t.Errorf("interface %s still there after Close", name)
	}
}

// checkPriority wants the device process pid to lead a session of its own
// and every thread of it at deviceNice, its autogroup too where the kernel
// has them.
func checkPriority(t *testing.T, pid int) {
	t.Helper()
	if sid, err := unix.Getsid(pid); err != nil || sid != pid {
		t.Errorf("session of the device process %d: %d (%v), want its own", pid, sid, err)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// The fields after the command's closing parenthesis: nice is
		// the 17th (field 19 of proc(5)).
		_, rest, _ := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); len(f) < 17 || f[16] != strconv.Itoa(deviceNice) {
			t.Errorf("thread %s of the device process: nice %v, want %d", task.Name(), f[min(16, len(f)):min(17, len(f))], deviceNice)
		}
	}
	ag, err := os.ReadFile(fmt.Sprintf("/proc/%d/autogroup", pid))
	if err == nil && !strings.HasSuffix(strings.TrimSpace(string(ag)), fmt.Sprintf("nice %d", deviceNice)) {
		t.Errorf("autogroup of the device process: %q, want nice %d", ag, deviceNice)
	}
}

// check compares the kernel's and the device's state with the expected.
func check(t *testing.T, name string, priv wgtypes.Key, addr string, peers []wgtypes.Key, routes []string) {
	t.Helper()
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer wg.Close()
	d, err := wg.Device(name)
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != wgtypes.Userspace || d.PrivateKey != priv || d.ListenPort != 51999 {
		t.Errorf("device %s: type %s, port %d, key set %v", name, d.Type, d.ListenPort, d.PrivateKey == priv)
	}
	var got []wgtypes.Key
	for _, p := range d.Peers {
		got = append(got, p.PublicKey)
	}
	byString := func(a, b wgtypes.Key) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(got, byString)
	slices.SortFunc(peers, byString)
	if !slices.Equal(got, peers) {
		t.Errorf("peers %v, want %v", got, peers)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("%s is down", name)
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 1 || addrs[0].IPNet.String() != addr+"/32" {
		t.Errorf("addresses %v, want %s/32", addrs, addr)
	}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var gotRoutes []string
	for _, r := range rs {
		if r.Dst != nil {
			gotRoutes = append(gotRoutes, r.Dst.String())
			if r.Src.String() != addr {
				t.Errorf("route to %s from %s, want from %s", r.Dst, r.Src, addr)
			}
		}
	}
	slices.Sort(gotRoutes)
	if !slices.Equal(gotRoutes, routes) {
		t.Errorf("routes through %s %v, want %v", name, gotRoutes, routes)
	}
}

func TestDeviceProcs(t *testing.T) {
	for _, tc := range []struct{ cpus, want int }{{1, 1}, {2, 1}, {3, 1}, {4, 2}, {16, 8}} {
		if got := deviceProcs(tc.cpus); got != tc.want {
			t.Errorf("deviceProcs(%d) = %d, want %d", tc.cpus, got, tc.want)
		}
	}
}
