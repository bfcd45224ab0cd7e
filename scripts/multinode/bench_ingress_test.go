package multinode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
)

// benchBackend is a Service of one instance on node1 answering "ok" on 8080
// with keep-alive: HAProxy itself (the ingress image) with a static answer,
// so neither path of the comparison forks per request.
func benchBackend(node string) string {
	cfg := `defaults\n  mode http\n  timeout client 30s\n  timeout server 30s\n  timeout connect 1s\n` +
		`frontend f\n  bind :8080\n  http-request return status 200 content-type text/plain string ok\n`
	return fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: backend
  namespace: default
spec:
  type: Service
  replicas: 1
  nodeSelector: {kat.harness/host: %s}
  restartPolicy: {condition: Always}
  source: {image: "docker.io/library/haproxy:2.6"}
  container:
    name: main
    command: ["/bin/sh", "-c", "printf '%s' > /dev/shm/b.cfg && exec haproxy -db -f /dev/shm/b.cfg"]
`, node, cfg)
}

// loadResult is one load run: requests per second and latency percentiles.
type loadResult struct {
	requests, failures int
	rps                float64
	p50, p99           time.Duration
}

// load sends GET / with Host host to addr from client over conns
// keep-alive connections for d, as fast as answers come, and measures.
func load(b *testing.B, client harness.Host, addr netip.AddrPort, host string, conns int, d time.Duration) loadResult {
	b.Helper()
	tr := &http.Transport{
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			var c net.Conn
			err := client.InNetns(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, a)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(b.Context(), d)
	defer cancel()
	var mu sync.Mutex
	var lat []time.Duration
	failures := 0
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/", nil)
				req.Host = host
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if ctx.Err() != nil {
					break // cut by the end of the run
				}
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat, failures = append(lat, mine...), failures+bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(lat)
	r := loadResult{requests: len(lat), failures: failures, rps: float64(len(lat)) / took.Seconds()}
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

// rssKiB is VmRSS of process pid, in KiB.
func rssKiB(b *testing.B, pid int) int {
	b.Helper()
	n, err := e2e.RSS(pid)
	if err != nil {
		b.Fatal(err)
	}
	return int(n / 1024)
}

// children are the child processes of pid.
func children(b *testing.B, pid int) []int {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		b.Fatal(err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// percentile is the p-th percentile (0-100) of sorted ds.
func percentile(ds []time.Duration, p int) time.Duration {
	return ds[min(len(ds)-1, len(ds)*p/100)]
}

// BenchmarkIngress measures the ingress on the multi-node harness (node1:
// leader and backend; node2: ingress; a client host): requests per second
// and p99 latency through the ingress (client -> node2:80 -> HAProxy ->
// overlay -> backend on node1) against the same client hitting the
// backend's published port on node1 directly, and their ratio; apply of a
// workload with a new host -> its first 200 through the ingress, p50 and
// p95 over 10 workloads; RSS of HAProxy's master and worker and of node2's
// kat-agent (the updater's process) before the proxy ran and after. A
// third path, through the ingress to a backend on the ingress node,
// separates HAProxy's cost from the overlay's. Run it with task
// bench:ingress (-benchtime 1x: it makes its 3 runs itself).
func BenchmarkIngress(b *testing.B) {
	requirePrereqs(b)
	c := startCluster(b, clusterSpec{name: "ib", hosts: 3, start: 2, ingress: []int{1}})
	node1, ingress, client := c.Hosts[0], c.Hosts[1], c.Hosts[2]
	katcall := func(args ...string) {
		if _, err := c.Katcall(b.Context(), c.bin.Katcall, args...); err != nil {
			b.Fatal(err)
		}
	}
	applyFiles := func(name string, files map[string]string) {
		dir := filepath.Join(b.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f, body := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		katcall("apply", "-f", dir)
	}
	waitGet := func(addr netip.Addr, host string, within time.Duration) time.Duration {
		start := time.Now()
		tick := time.NewTicker(20 * time.Millisecond) // the resolution
		defer tick.Stop()
		for time.Since(start) < within {
			if code, _, err := ingressGet(client, addr, host, "/"); err == nil && code == 200 {
				return time.Since(start)
			}
			select {
			case <-b.Context().Done():
			case <-tick.C:
			}
		}
		b.Fatalf("%s through %s: no 200 within %s", host, addr, within)
		return 0
	}
	agentBefore := rssKiB(b, c.agents[1].PID())

	katcall("apply", "-f", filepath.Join(e2e.RepoRoot(), "examples-repo", "kat-core"))
	applyFiles("backend", map[string]string{"workload.kat": benchBackend(node1.Name),
		"VirtualLoadBalancer.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: VirtualLoadBalancer\nspec:\n  ports:\n    - {name: http, containerPort: 8080}\n  ingress:\n    - {host: bench.test, servicePortName: http}\n"})
	// The same backend on the ingress node: HAProxy's own cost, without
	// the overlay hop.
	applyFiles("local", map[string]string{"workload.kat": strings.Replace(strings.Replace(benchBackend(ingress.Name), "name: backend", "name: local", 1), "bind :8080", "bind :8081", 1),
		"VirtualLoadBalancer.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: VirtualLoadBalancer\nspec:\n  ports:\n    - {name: http, containerPort: 8081}\n  ingress:\n    - {host: local.test, servicePortName: http}\n"})
	waitGet(ingress.Addr, "bench.test", 3*time.Minute)
	waitGet(ingress.Addr, "local.test", 3*time.Minute)
	direct := netip.AddrPortFrom(node1.Addr, 8080)
	if r := load(b, client, direct, "bench.test", 1, 200*time.Millisecond); r.requests == 0 {
		b.Fatalf("the backend does not answer on %s directly", direct)
	}

	// Runs of their own, whatever b.N (run it with -benchtime 1x): each
	// run's figures are printed.
	const runs, conns, d = 3, 16, 10 * time.Second
	via := netip.AddrPortFrom(ingress.Addr, 80)
	for i := range runs {
		var in, dir loadResult
		if i%2 == 0 {
			in, dir = load(b, client, via, "bench.test", conns, d), load(b, client, direct, "bench.test", conns, d)
		} else {
			dir, in = load(b, client, direct, "bench.test", conns, d), load(b, client, via, "bench.test", conns, d)
		}
		local := load(b, client, via, "local.test", conns, d)
		b.Logf("run %d, %d keep-alive connections for %s: through the ingress %.0f req/s, p50 %s, p99 %s (%d failed); direct %.0f req/s, p50 %s, p99 %s (%d failed); ratio %.2f req/s, %.2f p99; through the ingress to a backend on its own node (no overlay hop) %.0f req/s, p50 %s, p99 %s (%d failed), ratio to direct %.2f",
			i+1, conns, d, in.rps, in.p50.Round(10*time.Microsecond), in.p99.Round(10*time.Microsecond), in.failures,
			dir.rps, dir.p50.Round(10*time.Microsecond), dir.p99.Round(10*time.Microsecond), dir.failures,
			in.rps/dir.rps, float64(in.p99)/float64(dir.p99),
			local.rps, local.p50.Round(10*time.Microsecond), local.p99.Round(10*time.Microsecond), local.failures, local.rps/dir.rps)
		b.ReportMetric(in.rps, "ingress-req/s")
		b.ReportMetric(dir.rps, "direct-req/s")
		b.ReportMetric(in.rps/dir.rps, "ingress/direct")
		b.ReportMetric(float64(in.p99.Microseconds())/1000, "ingress-p99-ms")
		b.ReportMetric(float64(dir.p99.Microseconds())/1000, "direct-p99-ms")
		b.ReportMetric(local.rps, "ingress-same-node-req/s")
	}

	// Apply -> first 200 through the ingress, 10 workloads with new hosts.
	var delays []time.Duration
	for i := range 10 {
		name, host := fmt.Sprintf("route%d", i), fmt.Sprintf("route%d.test", i)
		start := time.Now()
		applyFiles(name, map[string]string{
			"workload.kat":            webWorkload(name, 1, node1.Name, "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"),
			"VirtualLoadBalancer.kat": webVLB + "  ingress:\n    - {host: " + host + ", servicePortName: http}\n",
		})
		waitGet(ingress.Addr, host, 2*time.Minute)
		delays = append(delays, time.Since(start))
	}
	b.Logf("apply of a workload with a new host -> first 200 through the ingress (instance start included): %v", delays)
	slices.Sort(delays)
	b.Logf("apply -> first 200 over %d workloads: p50 %s, p95 %s", len(delays),
		percentile(delays, 50).Round(time.Millisecond), percentile(delays, 95).Round(time.Millisecond))
	b.ReportMetric(float64(percentile(delays, 50).Milliseconds()), "apply-to-200-p50-ms")
	b.ReportMetric(float64(percentile(delays, 95).Milliseconds()), "apply-to-200-p95-ms")

	// RSS: the proxy container's HAProxy master (its init process) and
	// worker, node2's kat-agent before the recipe and now (12 routes).
	ids, err := ingress.Containers(b.Context(), "label=kat.workload=ingress", "status=running")
	if err != nil || len(ids) != 1 {
		b.Fatalf("the proxy container on %s: %v, %v", ingress.Name, ids, err)
	}
	out, err := ingress.Command(b.Context(), "podman", append(ingress.PodmanArgs(), "inspect", "--format", "{{.State.Pid}}", ids[0])...).Output()
	if err != nil {
		b.Fatal(err)
	}
	master, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		b.Fatal(err)
	}
	workers := children(b, master)
	workerRSS := 0
	for _, w := range workers {
		workerRSS += rssKiB(b, w)
	}
	agentAfter := rssKiB(b, c.agents[1].PID())
	b.Logf("RSS: HAProxy master %.1f MiB, worker %.1f MiB (%d process); %s's kat-agent %.1f MiB before the proxy, %.1f MiB with it and 12 routes (+%.1f MiB)",
		float64(rssKiB(b, master))/1024, float64(workerRSS)/1024, len(workers), ingress.Name,
		float64(agentBefore)/1024, float64(agentAfter)/1024, float64(agentAfter-agentBefore)/1024)
	b.ReportMetric(float64(rssKiB(b, master))/1024, "haproxy-master-MiB")
	b.ReportMetric(float64(workerRSS)/1024, "haproxy-worker-MiB")
	b.ReportMetric(float64(agentAfter)/1024, "agent-MiB")
}
