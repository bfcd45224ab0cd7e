package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// nodeNetworkForTest returns a driver like podmanForTest's whose networks
// live in a directory of the test's own, so no network of the machine is
// touched, a free /29 for the network and its gateway, and the label mark.
// netns, when not "", is a network namespace (under /run/netns) podman
// runs in.
func nodeNetworkForTest(t *testing.T, netns string) (*Podman, NetworkSpec, string) {
	t.Helper()
	base, mark := podmanForTest(t)
	dir := t.TempDir()
	cfg := base.Config()
	cfg.NetworkConfigDir = dir
	if netns != "" {
		// nsenter runs podman in the namespace; podman's global args go
		// after it.
		cfg.ExtraArgs = append([]string{"--net=/run/netns/" + netns, cfg.Binary, "--network-config-dir", dir}, cfg.ExtraArgs...)
		cfg.Binary, cfg.NetworkConfigDir = "nsenter", ""
	}
	pm := NewPodman(cfg)
	// A /29 of 10.213.0.0/16 no route of the machine covers, by the
	// test's mark, so parallel runs rarely meet.
	var b [1]byte
	fmt.Sscanf(mark[:2], "%02x", &b[0])
	sub := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, b[0], 8}), 29)
	spec := NetworkSpec{Name: "kat-" + mark[:8], Subnet: sub, Gateway: sub.Addr().Next()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if list, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark}); err == nil {
			for _, c := range list {
				_ = pm.RemoveContainer(ctx, c.ID, true)
			}
		}
		if err := pm.RemoveNetwork(ctx, spec.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return pm, spec, mark
}

// runOnNetwork runs a container of the base image on spec's network at ip,
// as the agent runs an instance with an overlay address, and returns its
// ID.
func runOnNetwork(ctx context.Context, t *testing.T, pm *Podman, spec NetworkSpec, mark, name string, ip netip.Addr) string {
	t.Helper()
	cs := testSpec(mark, name, "sleep", "1d")
	cs.Network, cs.IP = spec.Name, ip
	cs.DNS, cs.DNSSearch, cs.DNSOptions = []netip.Addr{spec.Gateway}, []string{"ns1.kat.test", "kat.test"}, []string{"ndots:2"}
	id, err := pm.RunContainer(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// execOut runs cmd in container id and returns its output.
func execOut(ctx context.Context, t *testing.T, pm *Podman, id string, cmd ...string) string {
	t.Helper()
	res, err := pm.Exec(ctx, id, cmd, 30*time.Second)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %v: %v (exit %d): %s", cmd, err, res.ExitCode, res.Output)
	}
	return string(res.Output)
}

// TestPodmanNodeNetwork: EnsureNetwork creates the node's network with its
// subnet and gateway and DNS off, leaves it alone when it matches, and
// recreates it for another subnet only once no container uses it; a
// container on it gets exactly its address and a resolv.conf with only the
// node's nameserver, the search path and the options asked for.
func TestPodmanNodeNetwork(t *testing.T) {
	pm, spec, mark := nodeNetworkForTest(t, "")
	ctx := testCtx(t)
	created, err := pm.EnsureNetwork(ctx, spec)
	if err != nil || !created {
		t.Fatalf("EnsureNetwork: created %v, %v", created, err)
	}
	info, err := pm.InspectNetwork(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if want := []NetworkSubnet{{Subnet: spec.Subnet.String(), Gateway: spec.Gateway.String()}}; !slices.Equal(info.Subnets, want) || info.DNSEnabled || info.Driver != "bridge" {
		t.Fatalf("network %+v, want a bridge with %+v and DNS off", info, want)
	}
	if created, err := pm.EnsureNetwork(ctx, spec); err != nil || created {
		t.Fatalf("EnsureNetwork of a matching network: created %v, %v", created, err)
	}

	ip := spec.Gateway.Next().Next().Next() // .4
	id := runOnNetwork(ctx, t, pm, spec, mark, "net", ip)
	addrs := execOut(ctx, t, pm, id, "ip", "-o", "-4", "addr", "show", "eth0")
	if !strings.Contains(addrs, " "+ip.String()+"/29 ") {
		t.Errorf("eth0 of the container:\n%s\nwant %s/29", addrs, ip)
	}
	var lines []string
	for _, l := range strings.Split(execOut(ctx, t, pm, id, "cat", "/etc/resolv.conf"), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	want := []string{"nameserver " + spec.Gateway.String(), "options ndots:2", "search ns1.kat.test kat.test"}
	if !slices.Equal(lines, want) {
		t.Errorf("resolv.conf lines %q, want %q", lines, want)
	}
	if routes := execOut(ctx, t, pm, id, "ip", "-4", "route"); !strings.Contains(routes, "default via "+spec.Gateway.String()) {
		t.Errorf("container routes:\n%s\nwant the default via the gateway %s", routes, spec.Gateway)
	}

	moved := spec
	moved.Subnet = netip.PrefixFrom(spec.Subnet.Addr().Next().Next().Next().Next().Next().Next().Next().Next(), 29) // the next /29
	moved.Gateway = moved.Subnet.Addr().Next()
	if _, err := pm.EnsureNetwork(ctx, moved); !errors.Is(err, ErrNetworkInUse) {
		t.Fatalf("EnsureNetwork of another subnet while a container uses the network: %v, want ErrNetworkInUse", err)
	}
	if info, err := pm.InspectNetwork(ctx, spec.Name); err != nil || info.Subnets[0].Subnet != spec.Subnet.String() {
		t.Fatalf("the network in use changed: %+v, %v", info, err)
	}
	if err := pm.RemoveContainer(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	if created, err := pm.EnsureNetwork(ctx, moved); err != nil || !created {
		t.Fatalf("EnsureNetwork of another subnet once unused: created %v, %v", created, err)
	}
	if info, err := pm.InspectNetwork(ctx, spec.Name); err != nil || info.Subnets[0].Subnet != moved.Subnet.String() {
		t.Fatalf("network after recreating: %+v, %v", info, err)
	}
}

// TestPodmanNodeNetworkBesideOverlayAddress: in a network namespace where
// the gateway address is on another interface as a /32 (as the overlay
// puts the node's overlay address on its WireGuard interface; a bare TUN
// device here), podman refuses to create the network; created before the
// address, the network is kept by EnsureNetwork, and netavark runs a
// container on it at its address, which the namespace reaches.
func TestPodmanNodeNetworkBesideOverlayAddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to make a network namespace")
	}
	for _, prog := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("skipping: %s is not installed", prog)
		}
	}
	name := fmt.Sprintf("katipam%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns del %s: %v: %s", name, err, out)
		}
	})
	pm, spec, mark := nodeNetworkForTest(t, name)
	ctx := testCtx(t)
	ip("-n", name, "link", "set", "lo", "up")
	overlay := func() {
		// A TUN device, as userspace WireGuard's (no dummy module here).
		ip("-n", name, "tuntap", "add", "dev", "katov0", "mode", "tun")
		ip("-n", name, "addr", "add", spec.Gateway.String()+"/32", "dev", "katov0")
		ip("-n", name, "link", "set", "katov0", "up")
	}
	overlay()
	// Podman refuses to create a network whose subnet holds an address of
	// an interface, a /32 too: the overlay must come after the network.
	if _, err := pm.EnsureNetwork(ctx, spec); err == nil || !strings.Contains(err.Error(), "is already used on the host") {
		t.Fatalf("EnsureNetwork with the gateway on another interface: %v, want podman's refusal", err)
	}
	ip("-n", name, "link", "del", "katov0")
	if _, err := pm.EnsureNetwork(ctx, spec); err != nil {
		t.Fatal(err)
	}
	overlay()
	if created, err := pm.EnsureNetwork(ctx, spec); err != nil || created {
		t.Fatalf("EnsureNetwork of the existing network once the overlay address is up: created %v, %v", created, err)
	}
	addr := spec.Gateway.Next()
	id := runOnNetwork(ctx, t, pm, spec, mark, "ov", addr)
	if out := execOut(ctx, t, pm, id, "ip", "-o", "-4", "addr", "show", "eth0"); !strings.Contains(out, " "+addr.String()+"/29 ") {
		t.Errorf("eth0 of the container:\n%s\nwant %s/29", out, addr)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("skipping the reachability check: busybox is not installed")
	}
	out, err := exec.Command("nsenter", "--net=/run/netns/"+name, busybox, "ping", "-c", "1", "-W", "5", addr.String()).CombinedOutput()
	if err != nil {
		t.Errorf("the namespace does not reach the container at %s: %v: %s", addr, err, out)
	}
	// A server on the gateway address, where the node's DNS server
	// listens, answers the container although the address is also the
	// overlay's.
	www := t.TempDir()
	if err := os.WriteFile(www+"/ok", []byte("node\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command("nsenter", "--net=/run/netns/"+name, busybox, "httpd", "-f", "-p", spec.Gateway.String()+":8053", "-h", www)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	var got string
	for range 50 { // until the server listens
		// busybox's static wget crashes here: a bare request over nc.
		res, err := pm.Exec(ctx, id, []string{"sh", "-c", `printf 'GET /ok HTTP/1.0\r\n\r\n' | nc -w 5 ` + spec.Gateway.String() + " 8053"}, 30*time.Second)
		if got = string(res.Output); err == nil && res.ExitCode == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // the server process gives no sign it listens
	}
	if !strings.HasSuffix(strings.TrimSpace(got), "\nnode") {
		t.Errorf("the container does not reach a server on the gateway %s: %q", spec.Gateway, got)
	}
	links, _ := exec.Command("ip", "-n", name, "-4", "-o", "addr").CombinedOutput()
	t.Logf("addresses in the namespace:\n%s", links)
}
