package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/harness"
)

// overlayCluster is a testCluster with what the overlay test reads.
type overlayCluster struct {
	*testCluster
	etcd *clientv3.Client
	wg   *wgctrl.Client
}

// records reads every node's overlay record, as agents read it.
func (c *overlayCluster) records(t testing.TB) map[string]api.NodeNetwork {
	t.Helper()
	return nodeNetworks(t, c.etcd)
}

// overlayIP waits until h's node has a subnet, key and endpoint and
// returns its overlay address.
func (c *overlayCluster) overlayIP(t testing.TB, h harness.Host) netip.Addr {
	t.Helper()
	var ip netip.Addr
	polltest.UntilErr(t, time.Minute, h.Name+"'s overlay record", func() error {
		n, ok := c.records(t)[h.Name]
		if !ok || !n.Subnet.IsValid() || n.PublicKey == "" || n.Endpoint != netip.AddrPortFrom(h.Addr, 51820).String() {
			return fmt.Errorf("record %+v", n)
		}
		ip = n.OverlayIP()
		return nil
	})
	return ip
}

// ping pings addr once from h; it returns the round trip in ms.
func ping(ctx context.Context, h harness.Host, addr netip.Addr, count int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "busybox", "ping", "-c", fmt.Sprint(count), "-W", "2", addr.String()).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ping %s from %s: %w: %s", addr, h.Name, err, out)
	}
	m := regexp.MustCompile(`min/avg/max = [0-9.]+/([0-9.]+)/`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("ping %s from %s: no round trip in %q", addr, h.Name, out)
	}
	var avg float64
	_, err = fmt.Sscan(string(m[1]), &avg)
	return avg, err
}

// waitReachable waits until every host of from pings addr.
func waitReachable(t testing.TB, from []harness.Host, addr netip.Addr, timeout time.Duration) {
	t.Helper()
	for _, h := range from {
		polltest.UntilErr(t, timeout, fmt.Sprintf("%s pings %s through the overlay", h.Name, addr), func() error {
			_, err := ping(t.Context(), h, addr, 1)
			return err
		})
	}
}

// device reads h's WireGuard device through its UAPI socket (the path is
// the same in every namespace).
func (c *overlayCluster) device(h harness.Host) (*wgtypes.Device, error) {
	return c.wg.Device(h.WGIface)
}

// routes lists the subnets routed through h's WireGuard interface.
func routes(t *testing.T, h harness.Host) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "ip", "-4", "route", "show", "dev", h.WGIface).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route in %s: %v: %s", h.Name, err, out)
	}
	var subnets []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			subnets = append(subnets, f[0])
		}
	}
	return subnets
}

// TestOverlay runs kat-agent in 3 of 4 hosts and checks the WireGuard
// overlay end to end: every node's overlay address answers ping from every
// other node (traffic inside the harness's namespaces only); each device is
// the userspace one (no kernel module here) and the log says so; a node
// that joins late becomes reachable by all; deleting a node removes its
// peer and route everywhere; a killed and restarted agent gets its
// interface and peers back. It logs the time from join to reachable and
// the round trip through the overlay against the underlay.
func TestOverlay(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
	tc := startCluster(t, clusterSpec{name: "ov", hosts: 4, start: 3, noImage: true})
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wg.Close() })
	c := &overlayCluster{testCluster: tc, etcd: leaderEtcd(t, tc.Cluster, nodeTLS(t, tc.Hosts[1])), wg: wg}
	hosts := c.Hosts[:3]
	ips := map[string]netip.Addr{}
	for _, h := range hosts {
		ips[h.Name] = c.overlayIP(t, h)
	}

	t.Run("every node pings every other through the overlay", func(t *testing.T) {
		for _, from := range hosts {
			for _, to := range hosts {
				if from.Name != to.Name {
					waitReachable(t, []harness.Host{from}, ips[to.Name], time.Minute)
				}
			}
		}
		overlay, err := ping(t.Context(), hosts[1], ips[hosts[0].Name], 10)
		if err != nil {
			t.Fatal(err)
		}
		underlay, err := ping(t.Context(), hosts[1], hosts[0].Addr, 10)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round trip node2 -> node1: %.3f ms through the overlay, %.3f ms on the underlay (%.1fx)", overlay, underlay, overlay/underlay)
	})

	t.Run("heartbeats carry each peer's last handshake", func(t *testing.T) {
		for _, h := range hosts {
			polltest.UntilErr(t, time.Minute, h.Name+"'s heartbeat names both peers with a handshake", func() error {
				var nodes []api.Node
				if err := json.Unmarshal([]byte(c.katcall(t, "get", "node", h.Name, "-o", "json")), &nodes); err != nil {
					return err
				}
				if len(nodes) != 1 {
					return fmt.Errorf("%d nodes named %s", len(nodes), h.Name)
				}
				n := nodes[0]
				if n.Usage == nil {
					return errors.New("no usage in the heartbeat")
				}
				shaken := 0
				for _, p := range n.Usage.OverlayPeers {
					if p.Node != h.Name && !p.LastHandshake.IsZero() && p.RxBytes > 0 {
						shaken++
					}
				}
				if shaken != 2 {
					return fmt.Errorf("overlay peers %+v, want the 2 other nodes with a handshake", n.Usage.OverlayPeers)
				}
				return nil
			})
		}
	})

	t.Run("userspace devices, and the log says so", func(t *testing.T) {
		for _, h := range hosts {
			d, err := c.device(h)
			if err != nil {
				t.Fatalf("%s: %v", h.Name, err)
			}
			if d.Type != wgtypes.Userspace || len(d.Peers) != 2 {
				t.Errorf("%s: device %s of type %s with %d peers, want userspace with 2", h.Name, d.Name, d.Type, len(d.Peers))
			}
			if log := h.AgentLogTail(1000); !strings.Contains(log, `"device_type":"userspace"`) || !strings.Contains(log, "no WireGuard kernel module") {
				t.Errorf("%s's log does not say it uses the userspace device", h.Name)
			}
		}
	})

	late := c.Hosts[3]
	t.Run("a node that joins late becomes reachable", func(t *testing.T) {
		started := time.Now()
		a, err := c.StartAgent(t.Context(), 3, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents = append(c.agents, a)
		ips[late.Name] = c.overlayIP(t, late)
		waitReachable(t, hosts, ips[late.Name], 2*time.Minute)
		t.Logf("node4 reachable by every node %s after its kat-agent join started", time.Since(started).Round(time.Millisecond))
		waitReachable(t, []harness.Host{late}, ips[hosts[0].Name], time.Minute)
	})

	t.Run("a deleted node's peer and route go everywhere", func(t *testing.T) {
		if err := c.agents[3].Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.agents[3].Wait(t.Context()); err != nil {
			t.Logf("node4's agent: %v", err)
		}
		sub := c.records(t)[late.Name].Subnet.String()
		c.katcall(t, "delete", "node", late.Name)
		for _, h := range hosts {
			polltest.UntilErr(t, time.Minute, h.Name+" drops node4", func() error {
				d, err := c.device(h)
				if err != nil {
					return err
				}
				if len(d.Peers) != 2 {
					return fmt.Errorf("%d peers", len(d.Peers))
				}
				if r := routes(t, h); strings.Contains(strings.Join(r, " "), sub) || len(r) != 2 {
					return fmt.Errorf("routes %v, want 2 without %s", r, sub)
				}
				return nil
			})
		}
	})

	t.Run("a killed agent gets its interface and peers back", func(t *testing.T) {
		h := hosts[2]
		if err := c.agents[2].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := c.agents[2].Wait(t.Context()); err == nil {
			t.Fatal("kat-agent exited cleanly after SIGKILL")
		}
		if _, err := os.Stat("/var/run/wireguard/" + h.WGIface + ".sock"); err != nil {
			t.Errorf("no UAPI socket after SIGKILL (%v): this step is to show that a restart replaces the stale one", err)
		}
		restarted := time.Now()
		a, err := c.StartAgent(t.Context(), 2, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents[2] = a
		waitReachable(t, []harness.Host{h}, ips[hosts[0].Name], time.Minute)
		waitReachable(t, hosts[:2], ips[h.Name], time.Minute)
		d, err := c.device(h)
		if err != nil || d.Type != wgtypes.Userspace || len(d.Peers) != 2 {
			t.Fatalf("%s's device after the restart: %+v, %v; want userspace with 2 peers", h.Name, d, err)
		}
		t.Logf("node3 reachable both ways %s after its agent restarted from SIGKILL", time.Since(restarted).Round(time.Millisecond))
	})
}
