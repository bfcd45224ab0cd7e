package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// Heartbeat benchmark sizes.
const (
	hbWorkloads = 1000
	hbNodes     = 50
	hbRounds    = 20 // each node beats once a second, 50 beats a second in all
)

// BenchmarkLeaderHeartbeatCPU measures the leader's CPU per node heartbeat:
// a real kat-agent leads 1,000 workloads (replicas 0, so no container runs)
// while 50 simulated nodes, each with its own node certificate, report the
// same instances every second for 20 seconds, as real agents do between
// changes. It reports the leader's CPU time over the heartbeats (less its
// CPU over as long an idle period just before) per heartbeat, and its RSS.
func BenchmarkLeaderHeartbeatCPU(b *testing.B) {
	for b.Loop() {
		c := StartTestCluster(b)
		client := clientFor(b, c)
		archives := zeroReplicaArchives(b, hbWorkloads)
		applyConcurrently(b, client, archives, 4)
		nodes := simulatedNodes(b, c, hbNodes)
		// Every node beats once first (the leader writes each first
		// status), then the leader settles.
		for _, n := range nodes {
			n.beat(b, 0)
		}
		waitIdle(b, c.PID())
		period := time.Duration(hbRounds) * time.Second
		idleStart, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(period) //nolint:forbidigo // the idle period is what is measured
		idleEnd, _ := cpuTicks(c.PID())
		start := idleEnd
		gap := time.Second / time.Duration(hbNodes)
		t0 := time.Now()
		sent := 0
		for r := 1; r <= hbRounds; r++ {
			for _, n := range nodes {
				n.beat(b, r)
				sent++
				if d := time.Until(t0.Add(time.Duration(sent) * gap)); d > 0 {
					time.Sleep(d) //nolint:forbidigo // pacing the simulated agents
				}
			}
		}
		end, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		rss, _ := RSS(c.PID())
		busy := ticksToMs(end-start) - ticksToMs(idleEnd-idleStart)*float64(time.Since(t0))/float64(period)
		perBeat := busy / float64(sent)
		b.ReportMetric(perBeat, "leader-cpu-ms/heartbeat")
		b.ReportMetric(ticksToMs(end-start), "leader-cpu-ms-total")
		b.ReportMetric(ticksToMs(idleEnd-idleStart), "leader-cpu-ms-idle")
		b.ReportMetric(float64(rss)/(1<<20), "leader-rss-MiB")
		fmt.Fprintf(os.Stderr, "heartbeats: %d from %d nodes over %s with %d workloads: leader CPU %.0f ms (%.0f ms over as long idle), %.3f ms per heartbeat; leader RSS %.1f MiB\n",
			sent, hbNodes, time.Since(t0).Round(time.Millisecond), hbWorkloads, ticksToMs(end-start), ticksToMs(idleEnd-idleStart), perBeat, float64(rss)/(1<<20))
	}
}

// zeroReplicaArchives makes n Service workloads with replicas 0.
func zeroReplicaArchives(tb testing.TB, n int) [][]byte {
	tb.Helper()
	out := make([][]byte, 0, n)
	for i := range n {
		var buf bytes.Buffer
		files := map[string][]byte{quadlet.WorkloadFile: zeroReplicaService(fmt.Sprintf("hb-%04d", i), 1000+i)}
		if err := quadlet.WriteArchive(&buf, files); err != nil {
			tb.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}

// zeroReplicaService is the workload.kat of a Service named name in the
// default namespace with replicas 0 (nothing runs), whose command sleeps
// for sleep seconds: changing sleep changes its spec.
func zeroReplicaService(name string, sleep int) []byte {
	return fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: default}
spec:
  type: Service
  replicas: 0
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "%d"]
`, name, sleep)
}

// simNode is a simulated agent: its own certificate, its own connection.
type simNode struct {
	name   string
	url    string
	client *http.Client
	body   map[string]any
}

// simulatedNodes registers n nodes and gives each a node certificate signed
// by the cluster CA (what join will do), and a fixed status to report.
func simulatedNodes(tb testing.TB, c *Cluster, n int) []*simNode {
	tb.Helper()
	pkiDir := filepath.Join(c.DataDir, "pki")
	ca, _, err := pki.EnsureCA(pki.PathsIn(pkiDir, "ca"), "unused")
	if err != nil {
		tb.Fatal(err)
	}
	nodeCert, _, err := pki.EnsureLeaf(pki.PathsIn(pkiDir, "node"), ca, pki.LeafRequest{CommonName: c.Node})
	if err != nil {
		tb.Fatal(err)
	}
	tlsEtcd, err := pki.ClientTLSConfig(ca.Pool(), nodeCert)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{c.EtcdClientURL()}, TLS: tlsEtcd})
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	repo := resources.New(st)
	certDir := tb.TempDir()
	out := make([]*simNode, 0, n)
	for i := range n {
		name := fmt.Sprintf("sim-%02d", i)
		if err := repo.PutNodeRegistration(ctx, resources.NodeRegistration{Name: name, UID: name, AdvertiseAddress: "127.0.0.1",
			JoinedAt: time.Now()}); err != nil {
			tb.Fatal(err)
		}
		leaf, _, err := pki.EnsureLeaf(pki.PathsIn(certDir, name), ca, pki.LeafRequest{CommonName: name})
		if err != nil {
			tb.Fatal(err)
		}
		cfg, err := pki.ClientTLSConfig(ca.Pool(), leaf)
		if err != nil {
			tb.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 1, ForceAttemptHTTP2: true}
		tr.TLSClientConfig.MinVersion = tls.VersionTLS12
		var instances []map[string]any
		for j := range 2 {
			id := fmt.Sprintf("%s-inst-%d", name, j)
			instances = append(instances, map[string]any{
				"workloadName": "ext", "namespace": "default", "instanceID": id, "generation": 1, "specHash": "h",
				"containerID": strings.Repeat("c", 64), "image": "localhost/kat-base:latest", "state": "running",
				"phase": "Running", "exitCode": 0, "healthStatus": "not_applicable", "restarts": 0,
				"startedAt": "2026-11-23T00:00:00Z",
			})
		}
		out = append(out, &simNode{
			name: name, url: "https://127.0.0.1:" + strconv.Itoa(c.APIPort) + "/v1alpha1/nodes/" + name + "/status",
			client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
			body: map[string]any{
				"nodeName": name, "nodeUID": name,
				"resources": map[string]any{"capacity": map[string]string{"cpu": "2000m", "memory": "4096Mi"},
					"allocatable": map[string]string{"cpu": "1800m", "memory": "3686Mi"}},
				"workloadInstances": instances,
				"conditions":        []map[string]string{{"type": "RuntimeReady", "status": "True", "reason": "RuntimeAvailable", "lastTransitionTime": "2026-11-23T00:00:00Z"}},
			},
		})
	}
	return out
}

// beat posts the node's status with a new timestamp and fails on anything
// but a 2xx.
func (n *simNode) beat(tb testing.TB, round int) {
	tb.Helper()
	n.body["timestamp"] = time.Now().Unix() + int64(round)
	b, err := json.Marshal(n.body)
	if err != nil {
		tb.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, n.url, bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		tb.Fatalf("heartbeat of %s: %v", n.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("heartbeat of %s: %s", n.name, resp.Status)
	}
}

// cpuTicks is the process's user plus system CPU time in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return u + s, nil
}

// ticksToMs converts clock ticks (USER_HZ, 100 on Linux) to milliseconds.
func ticksToMs(t int64) float64 { return float64(t) * 10 }

// waitIdle waits until the process used less than 5% of a CPU over a second,
// or a minute passed.
func waitIdle(tb testing.TB, pid int) {
	tb.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		a, err := cpuTicks(pid)
		if err != nil {
			tb.Fatal(err)
		}
		time.Sleep(time.Second) //nolint:forbidigo // measuring an idle second
		b, _ := cpuTicks(pid)
		if b-a <= 5 {
			return
		}
	}
}
