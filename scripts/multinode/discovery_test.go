package multinode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// clusterDomain is cluster.kat's default.
const clusterDomain = "kat.cluster.local"

// rootEtcd connects to the leader's etcd as its administrator, with the
// certificate the leader keeps in its data dir, to read what katcall does
// not show (overlay records, DNS records).
func rootEtcd(t testing.TB, c *harness.Cluster) *clientv3.Client {
	t.Helper()
	return leaderEtcd(t, c, certTLS(t, c.Hosts[0], "etcd-root"))
}

// nodeNetworks reads every node's overlay record.
func nodeNetworks(t testing.TB, cli *clientv3.Client) map[string]api.NodeNetwork {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, resources.NetworkNodesPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kvs := make([]store.KV, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		kvs = append(kvs, store.KV{Key: string(kv.Key), Value: kv.Value})
	}
	nets, err := resources.DecodeNodeNetworks(kvs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]api.NodeNetwork{}
	for _, n := range nets {
		out[n.Node] = n
	}
	return out
}

// lookupA asks the DNS server at server:53 for name's A records from inside
// host h, as a container of h would reach it.
func lookupA(h harness.Host, server netip.Addr, name string) ([]netip.Addr, int, error) {
	var addrs []netip.Addr
	var rcode int
	err := h.InNetns(func() error {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		cl := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		r, _, err := cl.Exchange(m, net.JoinHostPort(server.String(), "53"))
		if err != nil {
			return err
		}
		rcode = r.Rcode
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
					addrs = append(addrs, ip)
				}
			}
		}
		return nil
	})
	return addrs, rcode, err
}

// containerOf returns the ID of the one running container of workload on h.
func containerOf(t *testing.T, h harness.Host, workload string) string {
	t.Helper()
	var id string
	polltest.UntilErr(t, 2*time.Minute, workload+" running on "+h.Name, func() error {
		ids, err := h.Containers(t.Context(), "label=kat.workload="+workload, "status=running")
		if err != nil {
			return err
		}
		if len(ids) != 1 {
			return fmt.Errorf("%d running containers", len(ids))
		}
		id = ids[0]
		return nil
	})
	return id
}

// podmanExec runs a command in container id of host h.
func podmanExec(ctx context.Context, h harness.Host, id string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := h.Command(ctx, "podman", append(append(h.PodmanArgs(), "exec", id), args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("podman exec %s %v in %s: %w: %s", id, args, h.Name, err, out)
	}
	return string(out), nil
}

// web is a Service serving its instance's hostname on 8080 with a health
// check, so DNS follows its health.
func webExtra(replicas int, selector string) string {
	s := fmt.Sprintf("\n  replicas: %d", replicas)
	if selector != "" {
		s += "\n  nodeSelector: {kat.harness/host: " + selector + "}"
	}
	return s
}

const webVLB = `apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: 8080
  healthCheck:
    exec:
      command: ["/bin/sh", "-c", "wget -q -O /dev/null http://127.0.0.1:8080/"]
    periodSeconds: 1
    failureThreshold: 2
`

// applyWeb applies the web Service with its VirtualLoadBalancer.
func (c *testCluster) applyWeb(t *testing.T, replicas int, selector string) {
	t.Helper()
	c.applyFiles(t, "web", map[string]string{"workload.kat": webWorkload("web", replicas, selector,
		"mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"), "VirtualLoadBalancer.kat": webVLB})
}

// webWorkload is a Service of replicas (on the host selector, when set)
// running the shell command cmd.
func webWorkload(name string, replicas int, selector, cmd string) string {
	return fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service%s
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container:
    name: main
    command: ["/bin/sh", "-c", %q]
`, name, webExtra(replicas, selector), cmd)
}

// TestServiceDiscovery proves the overlay, IPAM and the agent DNS across nodes: a
// container on node1 reaches a Service on node2 by name, answers spread
// over the instances, an instance that dies leaves DNS, and a deleted
// node's peer and routes go from the others.
func TestServiceDiscovery(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "sd", hosts: 3})
	cli := rootEtcd(t, c.Cluster)

	var nets map[string]api.NodeNetwork
	polltest.UntilErr(t, time.Minute, "every node's overlay record", func() error {
		nets = nodeNetworks(t, cli)
		for _, h := range c.Hosts {
			n, ok := nets[h.Name]
			if !ok || !n.Subnet.IsValid() || n.PublicKey == "" || n.Endpoint == "" {
				return fmt.Errorf("records %+v", nets)
			}
		}
		return nil
	})
	for _, h := range c.Hosts {
		t.Logf("%s: subnet %v, overlay %v, endpoint %s", h.Name, nets[h.Name].Subnet, nets[h.Name].OverlayIP(), nets[h.Name].Endpoint)
	}
	node1, node2 := c.Hosts[0], c.Hosts[1]
	dns1 := nets[node1.Name].OverlayIP()
	webName := "web.default." + clusterDomain

	t.Run("a container on node1 fetches web served only on node2, by name", func(t *testing.T) {
		c.applyWeb(t, 1, node2.Name)
		c.apply(t, "client", "Service", "\n  replicas: 1\n  nodeSelector: {kat.harness/host: "+node1.Name+"}")
		webID := containerOf(t, node2, "web")
		clientID := containerOf(t, node1, "client")
		want, err := podmanExec(t.Context(), node2, webID, "cat", "/www/index.html")
		if err != nil {
			t.Fatal(err)
		}
		resolv, err := podmanExec(t.Context(), node1, clientID, "cat", "/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(resolv, "nameserver "+dns1.String()) || strings.Count(resolv, "nameserver") != 1 {
			t.Errorf("client's resolv.conf:\n%s\nwant only nameserver %v", resolv, dns1)
		}
		url := "http://" + webName + ":8080/"
		var got string
		start := time.Now()
		polltest.UntilErr(t, time.Minute, "client fetches "+url, func() error {
			got, err = podmanExec(t.Context(), node1, clientID, "wget", "-q", "-O", "-", url)
			return err
		})
		t.Logf("client on %s fetched %s from %s %s after both ran: %q", node1.Name, url, node2.Name, time.Since(start).Round(time.Millisecond), strings.TrimSpace(got))
		if strings.TrimSpace(got) != strings.TrimSpace(want) {
			t.Errorf("fetched %q, want %q (web's hostname on %s)", got, want, node2.Name)
		}
		// The short name resolves in the client's namespace.
		if _, err := podmanExec(t.Context(), node1, clientID, "wget", "-q", "-O", "/dev/null", "http://web:8080/"); err != nil {
			t.Errorf("short name: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("scaled to every node, answers spread", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				out, _ := c.Katcall(context.Background(), c.bin.Katcall, "status", "default/web")
				t.Logf("katcall status default/web:\n%s", out)
			}
		})
		c.applyWeb(t, 3, "")
		c.waitRunning(t, 2*time.Minute, "web", "1 running on every host", equal(1, 1, 1))
		var addrs []netip.Addr
		polltest.UntilErr(t, time.Minute, webName+" has 3 addresses at node1's DNS", func() error {
			var err error
			addrs, _, err = lookupA(node1, dns1, webName)
			if err == nil && len(addrs) != 3 {
				err = fmt.Errorf("addresses %v", addrs)
			}
			return err
		})
		// The answers rotate: the first address varies from query to
		// query. (A client's resolver may still sort them: glibc prefers
		// the address nearest its own.)
		firsts := map[netip.Addr]int{}
		for range 30 {
			got, _, err := lookupA(node1, dns1, webName)
			if err != nil || len(got) != 3 {
				t.Fatalf("lookup: %v, %v", got, err)
			}
			firsts[got[0]]++
		}
		t.Logf("first of the 3 answers over 30 queries at node1's DNS: %v", firsts)
		if len(firsts) < 2 {
			t.Errorf("30 answers all began with %v, want them rotated", firsts)
		}
		// Every instance, on every node, answers node1's client.
		clientID := containerOf(t, node1, "client")
		seen := map[string]bool{}
		for _, ip := range addrs {
			got, err := podmanExec(t.Context(), node1, clientID, "wget", "-q", "-O", "-", "http://"+ip.String()+":8080/")
			if err != nil {
				t.Errorf("client on %s fetching from %v: %v", node1.Name, ip, err)
				continue
			}
			seen[strings.TrimSpace(got)] = true
		}
		if len(seen) != 3 {
			t.Errorf("the 3 addresses answered as %v, want 3 instances", seen)
		}
	})

	t.Run("a hung instance leaves DNS within one health period", func(t *testing.T) {
		webID := containerOf(t, node2, "web")
		ipOut, err := podmanExec(t.Context(), node2, webID, "sh", "-c", "ip -4 -o addr show eth0")
		if err != nil {
			t.Fatal(err)
		}
		var ip netip.Addr
		for _, f := range strings.Fields(ipOut) {
			if p, err := netip.ParsePrefix(f); err == nil {
				ip = p.Addr()
			}
		}
		if !ip.IsValid() {
			t.Fatalf("no address in %q", ipOut)
		}
		// Freeze it: it stays "running" but fails its health checks.
		pause := node2.Command(t.Context(), "podman", append(node2.PodmanArgs(), "pause", webID)...)
		if out, err := pause.CombinedOutput(); err != nil {
			t.Fatalf("podman pause: %v: %s", err, out)
		}
		paused := time.Now()
		t.Cleanup(func() {
			_ = node2.Command(context.Background(), "podman", append(node2.PodmanArgs(), "unpause", webID)...).Run()
		})
		polltest.UntilErr(t, time.Minute, ip.String()+" out of "+webName, func() error {
			addrs, _, err := lookupA(node1, dns1, webName)
			if err == nil && slices.Contains(addrs, ip) {
				err = fmt.Errorf("still answered: %v", addrs)
			}
			return err
		})
		// periodSeconds 1 × failureThreshold 2, plus the agent's report.
		t.Logf("the paused instance's %v left node1's answers %s after the pause (health period 2 s, agent tick %d s)",
			ip, time.Since(paused).Round(time.Millisecond), tickSeconds)
	})

	t.Run("new instances resolvable on another node soon after they serve", func(t *testing.T) {
		if err := node2.Command(t.Context(), "podman", append(node2.PodmanArgs(), "unpause", "--all")...).Run(); err != nil {
			t.Logf("unpause: %v", err)
		}
		old := map[string]bool{}
		for _, a := range webAssignments(t, cli) {
			old[a.InstanceID] = true
		}
		c.applyWeb(t, 9, "")
		var fresh []api.Assignment
		polltest.UntilErr(t, time.Minute, "6 new web instances with addresses", func() error {
			fresh = fresh[:0]
			for _, a := range webAssignments(t, cli) {
				if !old[a.InstanceID] && a.IP.IsValid() {
					fresh = append(fresh, a)
				}
			}
			if len(fresh) < 6 {
				return fmt.Errorf("%d new", len(fresh))
			}
			return nil
		})
		hosts := map[string]harness.Host{}
		for _, h := range c.Hosts {
			hosts[h.Name] = h
		}
		// Per instance: when it first serves (seen from its own host)
		// and when node1's DNS first answers its name.
		type sample struct {
			id              string
			served, resolve time.Time
		}
		results := make(chan sample, len(fresh))
		for _, a := range fresh {
			go func() {
				s := sample{id: a.InstanceID}
				name := a.InstanceID + ".web.default." + clusterDomain
				addr := netip.AddrPortFrom(a.IP, 8080)
				deadline := time.Now().Add(2 * time.Minute)
				for time.Now().Before(deadline) && (s.served.IsZero() || s.resolve.IsZero()) {
					if s.served.IsZero() {
						if httpGetIn(hosts[a.Node], addr) == nil {
							s.served = time.Now()
						}
					}
					if s.resolve.IsZero() {
						if got, _, err := lookupA(node1, dns1, name); err == nil && len(got) == 1 && got[0] == a.IP {
							s.resolve = time.Now()
						}
					}
					time.Sleep(20 * time.Millisecond) //nolint:forbidigo // the sampling period
				}
				results <- s
			}()
		}
		var deltas []time.Duration
		for range fresh {
			s := <-results
			if s.served.IsZero() || s.resolve.IsZero() {
				t.Errorf("instance %s: served at %v, resolvable at %v", s.id, s.served, s.resolve)
				continue
			}
			deltas = append(deltas, s.resolve.Sub(s.served))
		}
		slices.Sort(deltas)
		if len(deltas) > 0 {
			p := func(q float64) time.Duration { return deltas[min(len(deltas)-1, int(q*float64(len(deltas))))] }
			t.Logf("instance serving -> its name answered by node1's DNS, over %d new instances: p50 %s, p95 %s, max %s (health check every 1 s, agent tick %d s); all %v",
				len(deltas), p(0.5).Round(time.Millisecond), p(0.95).Round(time.Millisecond), deltas[len(deltas)-1].Round(time.Millisecond), tickSeconds, deltas)
		}
	})

	for i, a := range c.agents {
		if rss, err := e2e.RSS(a.PID()); err == nil {
			t.Logf("%s's kat-agent (%s, with its overlay device and DNS server): RSS %.1f MiB", c.Hosts[i].Name,
				map[bool]string{true: "leader", false: "worker"}[i == 0], float64(rss)/(1<<20))
		}
	}

	t.Run("a deleted node's peer and routes go from the others", func(t *testing.T) {
		gone := c.Hosts[2]
		subnet := nets[gone.Name].Subnet
		c.katcall(t, "delete", "node", gone.Name, "--force")
		for _, h := range c.Hosts[:2] {
			polltest.UntilErr(t, time.Minute, h.Name+" has no route to "+subnet.String(), func() error {
				out, err := h.Command(t.Context(), "ip", "-4", "route", "show").CombinedOutput()
				if err != nil {
					return fmt.Errorf("ip route: %w: %s", err, out)
				}
				if strings.Contains(string(out), subnet.String()) {
					return fmt.Errorf("routes:\n%s", out)
				}
				return nil
			})
		}
	})
}

// webAssignments lists the assignments of default/web on every node.
func webAssignments(t *testing.T, cli *clientv3.Client) []api.Assignment {
	t.Helper()
	return assignmentsOf(t, cli, "web")
}

// assignmentsOf lists the assignments of default/workload on every node.
func assignmentsOf(t testing.TB, cli *clientv3.Client, workload string) []api.Assignment {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, resources.AssignmentsPrefix(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Assignment
	for _, kv := range resp.Kvs {
		a, err := resources.DecodeAssignment(kv.Value)
		if err == nil && a.Namespace == "default" && a.Workload == workload {
			out = append(out, a)
		}
	}
	return out
}

// httpGetIn sends GET / to addr from inside host h and succeeds on a 200.
// It dials in the calling goroutine, so on InNetns's thread: an
// http.Client dials on goroutines of its own, in the machine's namespace.
func httpGetIn(h harness.Host, addr netip.AddrPort) error {
	return h.InNetns(func() error {
		conn, err := net.DialTimeout("tcp", addr.String(), time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET http://%s/: %s", addr, resp.Status)
		}
		return nil
	})
}
