package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestAgentWithPodmanRunsInstancesOnTheNodeNetwork runs an agent on real
// Podman for a node with an overlay subnet: it makes the node's network
// (subnet, gateway at the node's overlay address) and runs the assigned
// instance on it at exactly its address, with the node's address as only
// nameserver and its namespace's search path; the instance's port answers
// at its address and, published as before, at its host port.
func TestAgentWithPodmanRunsInstancesOnTheNodeNetwork(t *testing.T) {
	base, ids := podmanForAgentTest(t)
	mark := randomHex(t)
	node, cluster := "it-net-"+mark, "cluster-"+mark
	const testLabel = "kat.test"
	cfg := base.Config()
	cfg.NetworkConfigDir = t.TempDir() // the machine's networks stay untouched
	pm := runtime.NewPodman(cfg)
	t.Cleanup(func() {
		removeMarked(t, pm, testLabel, mark)
		if err := pm.RemoveNetwork(context.Background(), DefaultNetworkName); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if err := pm.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	repo := resources.New(storetest.New(t))
	octet, _ := strconv.ParseUint(mark[:2], 16, 8)
	cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 214, byte(octet), 0}), 24)
	nn, err := repo.EnsureNodeNetwork(ctx, node, cidr, 5, "", "") // a /29
	if err != nil {
		t.Fatal(err)
	}
	ip := nn.OverlayIP().Next().Next() // the third address
	slot := int(ids.Slots()/3) + 1
	files := map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: ` + baseImage + `}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/httpd", "-f", "-p", "8080", "-h", "/etc"]
    stopGracePeriodSeconds: 0
`), "VirtualLoadBalancer.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports: [{containerPort: 8080}]
`)}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatal(err)
	}
	a := api.Assignment{InstanceID: "web-" + mark, Node: node, Namespace: "ns1", Workload: "web", SpecHash: "h",
		Generation: 1, Image: baseImage, RestartPolicy: quadlet.RestartAlways, Files: files, UserNSSlot: &slot,
		CreatedAt: time.Now(), IP: ip}
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{a}, nil); err != nil {
		t.Fatal(err)
	}
	ag, _, stop := runPodmanAgent(t, AgentConfig{Repo: repo, Node: node, ClusterUID: cluster, Runtime: pm, Networks: pm,
		ClusterDomain: "kat.test", Resync: time.Second, Tick: 50 * time.Millisecond,
		HostPorts: runtime.PortRange{First: 42000, Last: 42999}}, NewSpecBuilder(node, t.TempDir(), &ids), testLabel, mark)
	defer stop()

	var id string
	polltest.UntilErr(t, 2*time.Minute, "the instance running", func() error {
		for _, is := range ag.Instances() {
			if is.Phase == api.InstanceRunning {
				id = is.ContainerID
				return nil
			}
		}
		return fmt.Errorf("instances %+v", ag.Instances())
	})
	info, err := pm.InspectNetwork(ctx, DefaultNetworkName)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Subnets) != 1 || info.Subnets[0].Subnet != nn.Subnet.String() || info.Subnets[0].Gateway != nn.OverlayIP().String() || info.DNSEnabled {
		t.Errorf("network %+v, want subnet %s gateway %s, DNS off", info, nn.Subnet, nn.OverlayIP())
	}
	exec := func(cmd ...string) string {
		t.Helper()
		res, err := pm.Exec(ctx, id, cmd, 30*time.Second)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %v: %v (exit %d): %s", cmd, err, res.ExitCode, res.Output)
		}
		return string(res.Output)
	}
	if out := exec("ip", "-o", "-4", "addr", "show", "eth0"); !strings.Contains(out, " "+ip.String()+"/29 ") {
		t.Errorf("eth0:\n%s\nwant %s/29", out, ip)
	}
	resolv := exec("cat", "/etc/resolv.conf")
	for _, want := range []string{"nameserver " + nn.OverlayIP().String(), "search ns1.kat.test kat.test", "options ndots:2"} {
		if !strings.Contains(resolv, want+"\n") {
			t.Errorf("resolv.conf:\n%s\nlacks %q", resolv, want)
		}
	}
	if n := strings.Count(resolv, "nameserver "); n != 1 {
		t.Errorf("resolv.conf has %d nameservers, want only the node's:\n%s", n, resolv)
	}

	c, err := pm.InspectContainer(ctx, id)
	if err != nil || len(c.Ports) != 1 {
		t.Fatalf("published ports of the instance: %+v, %v", c, err)
	}
	for _, url := range []string{
		"http://" + ip.String() + ":8080/hostname",
		"http://127.0.0.1:" + strconv.Itoa(c.Ports[0].HostPort) + "/hostname",
	} {
		polltest.UntilErr(t, 30*time.Second, "the instance answers at "+url, func() error {
			resp, err := http.Get(url) //nolint:noctx // bounded by the client's default transport and the poll
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", resp.Status, body)
			}
			return nil
		})
	}
}
