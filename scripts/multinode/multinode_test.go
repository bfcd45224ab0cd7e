package multinode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
)

// The test cluster's timing: a short tick and node-loss timeout so that node
// loss is seen within seconds.
const (
	tickSeconds     = 1
	nodeLossSeconds = 5
)

// requirePrereqs skips (or fails, see testenv.SkipOrFail) without what a
// cluster of hosts with real Podman needs.
func requirePrereqs(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "a cluster of network namespaces needs root")
	}
	for _, tool := range []string{"ip", "nsenter", "iptables", "podman", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(t, "%s is not installed (scripts/install-prereqs.sh)", tool)
		}
	}
}

// testCluster is a harness with a kat-agent in every host.
type testCluster struct {
	*harness.Cluster
	bin    e2e.Binaries
	opts   harness.AgentOptions
	agents []*harness.Agent
}

// clusterSpec says what startCluster makes.
type clusterSpec struct {
	// name prefixes the harness's name (with the process ID).
	name string
	// hosts is the number of hosts; start how many of them run kat-agent
	// at once (0: all).
	hosts, start int
	// noImage skips building the base image in every host's Podman.
	noImage bool
	// members is cluster.kat's spec.etcdMembers: hosts 2 to members join
	// with --etcd-peer (0: every other host is a worker).
	members int
	// peers, when set, is how many hosts are etcd members (hosts 2 to
	// peers join with --etcd-peer), fewer than members allows.
	peers int
	// hooks, when set, makes cluster.kat follow hooks.config with webhooks
	// signed by hooks.secret, polling every hookPollSeconds.
	hooks *hookRepos
	// collectAfter is cluster.kat's nodeCollectAfterSeconds (0: default).
	collectAfter int
	// ingress are the hosts (by index) labelled kat.dws.rip/role=ingress;
	// with any, every host gets the ingress proxy's image too.
	ingress []int
	// userTiming keeps a user's defaults of the agent tick and node-loss
	// timeout (benchmarks), not the tests' short ones.
	userTiming bool
	// args, when set, gives more kat-agent flags by host name, once the
	// hosts (and so their addresses) are known.
	args func(hosts []harness.Host) map[string][]string
}

// startCluster brings up the hosts of spec running kat-agent, every started
// node Ready; the agents, their containers and the hosts go when t ends,
// also when it fails.
func startCluster(t testing.TB, spec clusterSpec) *testCluster {
	t.Helper()
	bin := binaries
	// Podman refuses a run root of more than 50 characters: t.TempDir's
	// paths are too long for StateDir/nodeN/podman/run.
	short, err := os.MkdirTemp("", "kmn") //nolint:usetesting // see above

	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) }) // after Down, which runs first
	stateDir := filepath.Join(short, "c")
	c, err := harness.Up(t.Context(), harness.Options{Name: fmt.Sprintf("%s%d", spec.name, os.Getpid()), Hosts: spec.hosts, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			kept := keepAgentLogs(t, c)
			for _, h := range c.Hosts {
				t.Logf("the end of %s's kat-agent log (whole: %s):\n%s", h.Name, kept[h.Name], h.AgentLogTail(15))
			}
		}
		if err := errors.Join(c.StopAgents(ctx), c.RemoveContainers(ctx), c.Down(ctx)); err != nil {
			t.Errorf("take the cluster down: %v", err)
		}
		checkLogs(t, c)
	})
	tc := &testCluster{Cluster: c, bin: bin}
	tc.opts = harness.AgentOptions{
		Agent: bin.Agent, Katcall: bin.Katcall,
		AgentTickSeconds: tickSeconds, NodeLossTimeoutSeconds: nodeLossSeconds,
		BaseImageScript: filepath.Join(e2e.RepoRoot(), "scripts", "build-base-image.sh"),
		Labels:          map[string]map[string]string{},
		Start:           spec.start, EtcdMembers: spec.members, EtcdPeers: spec.peers, NodeCollectAfterSeconds: spec.collectAfter,
	}
	if spec.hooks != nil {
		tc.opts.ConfigRepo = "file://" + spec.hooks.config.bare
		tc.opts.WebhookSecretFile = spec.hooks.secretFile
		tc.opts.ConfigPollSeconds = hookPollSeconds
	}
	if spec.noImage {
		tc.opts.BaseImageScript = ""
	}
	if spec.userTiming {
		tc.opts.AgentTickSeconds, tc.opts.NodeLossTimeoutSeconds = 0, 0 // the harness's defaults are a user's
	}
	for i, h := range c.Hosts {
		tc.opts.Labels[h.Name] = map[string]string{"zone": string(rune('a' + i))}
		if slices.Contains(spec.ingress, i) {
			tc.opts.Labels[h.Name]["kat.dws.rip/role"] = "ingress"
		}
	}
	if spec.args != nil {
		tc.opts.Args = spec.args(c.Hosts)
	}
	if len(spec.ingress) > 0 {
		tc.opts.ImageScripts = []string{filepath.Join(e2e.RepoRoot(), "scripts", "build-ingress-image.sh")}
	}
	start := time.Now()
	tc.agents, err = c.StartAgents(t.Context(), tc.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes Ready %s after the hosts were up", len(tc.agents), time.Since(start).Round(time.Millisecond))
	return tc
}

func (c *testCluster) katcall(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Katcall(t.Context(), c.bin.Katcall, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// running counts the running containers of workload on every host, in the
// hosts' order, as each host's Podman lists them.
func (c *testCluster) running(ctx context.Context, workload string) ([]int, error) {
	counts := make([]int, len(c.Hosts))
	for i, h := range c.Hosts {
		ids, err := h.Containers(ctx, "label=kat.workload="+workload, "status=running")
		if err != nil {
			return nil, err
		}
		counts[i] = len(ids)
	}
	return counts, nil
}

// waitRunning waits until want(counts) holds and returns the counts.
func (c *testCluster) waitRunning(t *testing.T, timeout time.Duration, workload, what string, want func([]int) bool) []int {
	t.Helper()
	var counts []int
	polltest.UntilErr(t, timeout, workload+": "+what, func() error {
		var err error
		if counts, err = c.running(t.Context(), workload); err != nil {
			return err
		}
		if !want(counts) {
			return fmt.Errorf("running per host %v", counts)
		}
		return nil
	})
	return counts
}

func sum(counts []int) int {
	s := 0
	for _, n := range counts {
		s += n
	}
	return s
}

func equal(want ...int) func([]int) bool {
	return func(got []int) bool { return fmt.Sprint(got) == fmt.Sprint(want) }
}

// apply writes a workload.kat and applies it.
func (c *testCluster) apply(t *testing.T, name, typ, extra string) {
	t.Helper()
	c.applyKat(t, name, fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: %s%s
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`, name, typ, extra))
}

// applyKat applies workload name whose workload.kat is kat.
func (c *testCluster) applyKat(t *testing.T, name, kat string) {
	t.Helper()
	c.applyFiles(t, name, map[string]string{"workload.kat": kat})
}

// applyFiles writes files into a workload directory name and applies it.
func (c *testCluster) applyFiles(t testing.TB, name string, files map[string]string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, content := range files {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.katcall(t, "apply", "-f", dir)
}

// TestCluster runs the multi-node scenarios on one 3-node cluster, in order:
// each step starts from what the one before left.
func TestCluster(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "mn", hosts: 3})

	t.Run("three nodes Ready with their labels", func(t *testing.T) {
		nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) != 3 {
			t.Fatalf("katcall get nodes lists %v, want node1, node2, node3", nodes)
		}
		for i, n := range nodes {
			h := c.Hosts[i]
			if n.Name != h.Name || n.Status != "Ready" || n.Labels["zone"] != string(rune('a'+i)) || n.Labels["kat.harness/host"] != h.Name {
				t.Errorf("node %d: %+v, want %s Ready with zone=%c and kat.harness/host=%s", i, n, h.Name, 'a'+i, h.Name)
			}
		}
		if t.Failed() {
			t.Logf("katcall get nodes:\n%s", c.katcall(t, "get", "nodes"))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("six replicas spread 2/2/2 on the hosts' Podman", func(t *testing.T) {
		c.apply(t, "spread", "Service", "\n  replicas: 6")
		counts := c.waitRunning(t, 2*time.Minute, "spread", "2 running on every host", equal(2, 2, 2))
		t.Logf("running per host: %v", counts)
	})

	t.Run("a DaemonService runs once on every node", func(t *testing.T) {
		c.apply(t, "everywhere", "DaemonService", "")
		c.waitRunning(t, 2*time.Minute, "everywhere", "1 running on every host", equal(1, 1, 1))
	})

	t.Run("a killed worker's instances are replaced and stopped when it returns", func(t *testing.T) {
		lost := 2 // node3
		before, err := c.running(t.Context(), "spread")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.agents[lost].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if err := c.agents[lost].Wait(t.Context()); err == nil {
			t.Fatal("kat-agent exited cleanly after SIGKILL")
		}
		// Its containers keep running: to the leader this is a partition.
		bound := time.Duration(nodeLossSeconds+5) * time.Second
		counts := c.waitRunning(t, bound+30*time.Second, "spread", "6 running on node1 and node2",
			func(n []int) bool { return n[0]+n[1] == 6 })
		took := time.Since(killed)
		t.Logf("replaced %d instances of node3 on node1 and node2 %s after kill -9 (nodeLossTimeoutSeconds %d, bound %s); running per host %v (before %v)",
			before[lost], took.Round(time.Millisecond), nodeLossSeconds, bound, counts, before)
		// The polls run a podman ps per host: allow their round's time.
		if slack := 3 * time.Second; took > bound+slack {
			t.Errorf("replacement took %s, want at most nodeLossTimeoutSeconds + 5 s = %s (+%s for the polls)", took, bound, slack)
		}
		if counts[lost] != before[lost] {
			t.Errorf("node3 runs %d instances while its agent is dead, want the %d it had (nothing stops them)", counts[lost], before[lost])
		}
		if d, err := c.running(t.Context(), "everywhere"); err != nil || d[0] != 1 || d[1] != 1 {
			t.Errorf("DaemonService per host after the loss: %v, %v; want its instances on node1 and node2 left alone", d, err)
		}

		a, err := c.StartAgent(t.Context(), lost, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents[lost] = a
		restarted := time.Now()
		counts = c.waitRunning(t, 2*time.Minute, "spread", "exactly 6 running in all, none left on node3",
			func(n []int) bool { return sum(n) == 6 && n[lost] == 0 })
		t.Logf("node3's replaced instances stopped %s after its agent restarted; running per host %v",
			time.Since(restarted).Round(time.Millisecond), counts)
		polltest.UntilErr(t, time.Minute, "node3 Ready again", func() error {
			nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.Name == "node3" && n.Status == "Ready" {
					return nil
				}
			}
			return fmt.Errorf("nodes %v", nodes)
		})
		c.waitRunning(t, time.Minute, "everywhere", "still 1 on every host", equal(1, 1, 1))
	})

	t.Run("drain --wait empties a node", func(t *testing.T) {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, "drain", "node2", "--wait", "--timeout", "2m")
		if err != nil {
			t.Fatalf("katcall drain node2 --wait: %v", err)
		}
		t.Logf("katcall drain node2 --wait:\n%s", out)
		// drain --wait returns once the assignments are gone; the agent
		// then removes the containers.
		counts := c.waitRunning(t, time.Minute, "spread", "none on node2, 6 in all",
			func(n []int) bool { return n[1] == 0 && sum(n) == 6 })
		t.Logf("spread per host after the drain: %v", counts)
		c.waitRunning(t, time.Minute, "everywhere", "none on node2", func(n []int) bool { return n[1] == 0 })
	})

	t.Run("a worker's credentials cannot write desired state", func(t *testing.T) {
		checkWorkerRefused(t, c.Cluster, c.Hosts[1])
	})

	t.Run("the audit log shows the joins and the drain", func(t *testing.T) {
		checkAuditJoinsAndDrain(t, c)
	})
}

// checkAuditJoinsAndDrain reads katcall get audit node: node2 and node3
// joined with the join token, and the admin drained node2.
func checkAuditJoinsAndDrain(t *testing.T, c *testCluster) {
	t.Helper()
	out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "audit", "node", "--limit", "1000", "-o", "json")
	if err != nil {
		t.Fatalf("katcall get audit node: %v", err)
	}
	var es []struct {
		Actor, Verb, Name string
		Status            int
	}
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("katcall get audit -o json: %v\n%s", err, out)
	}
	var got []string
	for _, e := range es {
		got = append(got, fmt.Sprintf("%s %s %s %d", e.Actor, e.Verb, e.Name, e.Status))
	}
	for _, want := range []string{"join-token join node2 200", "join-token join node3 200", "admin drain node2 200"} {
		if !slices.Contains(got, want) {
			t.Errorf("katcall get audit node lacks %q:\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// checkWorkerRefused uses the node certificate and key in worker's data dir
// against the leader's etcd and API: every write of desired state,
// assignments or another node's keys is refused.
func checkWorkerRefused(t *testing.T, c *harness.Cluster, worker harness.Host) {
	t.Helper()
	tlsCfg := nodeTLS(t, worker)
	leader := c.Hosts[0].Addr
	cli := leaderEtcd(t, c, tlsCfg)
	checkWorkerRefusedKeys(t, cli, worker, leader, tlsCfg)
}

// nodeTLS is a client TLS configuration with the node certificate and key
// in h's data directory, trusting the cluster CA.
func nodeTLS(t testing.TB, h harness.Host) *tls.Config {
	t.Helper()
	return certTLS(t, h, "node")
}

// certTLS is a client TLS configuration with the certificate and key
// h's data dir keeps as pki/NAME.{crt,key} ("etcd-root" on the leader:
// its etcd administrator's) and the cluster CA.
func certTLS(t testing.TB, h harness.Host, name string) *tls.Config {
	t.Helper()
	pki := filepath.Join(h.DataDir, "pki")
	cert, err := tls.LoadX509KeyPair(filepath.Join(pki, name+".crt"), filepath.Join(pki, name+".key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in ca.crt")
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}
}

// leaderEtcd is a client of the leader's etcd with tlsCfg, closed when t
// ends.
func leaderEtcd(t testing.TB, c *harness.Cluster, tlsCfg *tls.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"https://" + netip.AddrPortFrom(c.Hosts[0].Addr, 2379).String()},
		TLS:         tlsCfg,
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// checkWorkerRefusedKeys is checkWorkerRefused's check with worker's etcd
// client cli.
func checkWorkerRefusedKeys(t *testing.T, cli *clientv3.Client, worker harness.Host, leader netip.Addr, tlsCfg *tls.Config) {
	t.Helper()
	for _, key := range []string{
		"/kat/workloads/desired/default/spread/meta",
		"/kat/workloads/desired/default/evil/manifest/workload.kat",
		"/kat/assignments/" + worker.Name + "/evil",
		"/kat/assignments/node1/evil",
		"/kat/nodes/status/node1",
		"/kat/nodes/registration/" + worker.Name,
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := cli.Put(ctx, key, "written by "+worker.Name)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("etcd put %s with %s's certificate: %v, want permission denied", key, worker.Name, err)
		}
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	url := "https://" + netip.AddrPortFrom(leader, harness.APIPort).String() + "/v1alpha1/n/default/workloads/evil"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("PUT %s with %s's certificate: %s, want 401 or 403", url, worker.Name, resp.Status)
	}
}

// checkLogs reads every line the hosts' kat-agents logged (JSON, the
// harness starts them with --log-format json) and fails t on one that log
// pipelines would refuse: not one JSON object, or a key twice.
func checkLogs(t testing.TB, c *harness.Cluster) {
	t.Helper()
	for _, h := range c.Hosts {
		b, err := os.ReadFile(h.AgentLog())
		if errors.Is(err, fs.ErrNotExist) {
			continue // the host's agent never started
		}
		if err != nil {
			t.Errorf("read %s's log: %v", h.Name, err)
			continue
		}
		bad := 0
		for line := range strings.Lines(string(b)) {
			line = strings.TrimSpace(line)
			if line == "" || !strings.HasPrefix(line, "{") {
				continue // a child's stray output, not the logger's
			}
			if err := testenv.CheckJSONLine(line); err != nil {
				if bad++; bad <= 3 {
					t.Errorf("%s's kat-agent logged a line log pipelines refuse (%v): %s", h.Name, err, line)
				}
			}
		}
	}
}

// keepAgentLogs copies the kat-agent logs of a failed test's hosts out of
// the cluster's state directory, which the test removes, into a directory
// of the system's temporary one that stays, and returns each copy's path
// by host name (a copy that failed: why).
func keepAgentLogs(t testing.TB, c *harness.Cluster) map[string]string {
	t.Helper()
	kept := map[string]string{}
	dir, err := os.MkdirTemp("", "kat-multinode-"+strings.ReplaceAll(t.Name(), "/", "_")+"-") //nolint:usetesting // kept after the test
	if err != nil {
		for _, h := range c.Hosts {
			kept[h.Name] = "not kept: " + err.Error()
		}
		return kept
	}
	for _, h := range c.Hosts {
		b, err := os.ReadFile(h.AgentLog())
		if err == nil {
			dst := filepath.Join(dir, h.Name+"-kat-agent.log")
			if err = os.WriteFile(dst, b, 0o600); err == nil {
				kept[h.Name] = dst
				continue
			}
		}
		kept[h.Name] = "not kept: " + err.Error()
	}
	return kept
}
