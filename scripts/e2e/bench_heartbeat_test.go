package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader"
)

// hbWorkloads is how many workloads the leader holds during the heartbeat
// benchmarks.
const hbWorkloads = 1000

// BenchmarkLeaderHeartbeatCPU measures the leader's CPU per node heartbeat:
// a real kat-agent leads 1,000 workloads (replicas 0, so no container runs)
// while 50 simulated nodes, each with its own node certificate, report the
// same instances every second for 20 seconds, as real agents do between
// changes, with a usage sample (the node's and two containers') that
// differs at every beat.
func BenchmarkLeaderHeartbeatCPU(b *testing.B) {
	benchHeartbeats(b, 50, time.Second, 20)
}

// BenchmarkLeaderHeartbeat1000Nodes is the same with 1,000 simulated nodes,
// each beating at the default agentTickSeconds (15 s), for two ticks: what
// a leader of a large cluster handles all the time.
func BenchmarkLeaderHeartbeat1000Nodes(b *testing.B) {
	benchHeartbeats(b, 1000, time.Duration(quadlet.DefaultAgentTickSeconds)*time.Second, 2)
}

// benchHeartbeats joins nodes simulated nodes to a real leader of
// hbWorkloads workloads and has each beat once per tick for rounds ticks,
// evenly spread. It reports the leader's CPU time over the heartbeats (less
// its CPU over as long an idle period just before) per heartbeat and as a
// share of one core, the heartbeats' latency, and the leader's RSS.
func benchHeartbeats(b *testing.B, nodes int, tick time.Duration, rounds int) {
	b.Helper()
	for b.Loop() {
		// The defaults' tick and node-loss timeout (the test cluster's 10 s
		// would lose a node between two 15 s beats, and a node lost and
		// back is a pass over every workload, not a heartbeat's cost), and
		// a node subnet for each of 1,000 nodes.
		c := startClusterFrom(b, filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster-heartbeats.kat"))
		client := clientFor(b, c)
		archives := zeroReplicaArchives(b, hbWorkloads)
		applyConcurrently(b, client, archives, 4)
		sims := simulatedNodes(b, c, nodes)
		// Every node beats once first (the leader writes each first
		// status), then the leader settles. Then every node beats again,
		// paced like the measured beats, and the leader settles again: a
		// node the leader lost while it settled that beats again is a
		// change (a pass over every workload), which must not fall into
		// the measured heartbeats; and after a paced round no node's last
		// beat is older than a tick when the idle period starts.
		for _, n := range sims {
			if err := n.beat(0); err != nil {
				b.Fatal(err)
			}
		}
		waitIdle(b, c.PID())
		if _, err := beatPaced(sims, tick, 1); err != nil {
			b.Fatal(err)
		}
		settled := time.Now()
		waitIdle(b, c.PID())
		// The leader's CPU while idle, over as long as the heartbeats but
		// less than the node-loss timeout (60 s) less a tick, which no
		// node may reach.
		idle := min(time.Duration(rounds)*tick, 30*time.Second)
		idleStart, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(idle) //nolint:forbidigo // the idle period is what is measured
		idleEnd, _ := cpuTicks(c.PID())
		start := idleEnd
		// With KAT_AGENT_HEAPPROFILE_DIR set, the leader's CPU profile of
		// the heartbeats alone.
		profiled := c.SaveCPUProfile("heartbeats", time.Duration(rounds)*tick)
		t0 := time.Now()
		latencies, err := beatPaced(sims, tick, rounds)
		if err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(t0)
		end, err := cpuTicks(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		// A node lost and back is a pass over every workload, not a
		// heartbeat's cost: the figure would not be the heartbeats'.
		lost, err := client.ListEventsMatching(context.Background(), apiclient.EventQuery{Kind: api.KindNode,
			Type: api.EventWarning, Since: settled.Add(time.Second).UTC().Format(time.RFC3339), Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		if lost = slices.DeleteFunc(lost, func(e api.Event) bool { return e.Reason != leader.EventNodeNotReady }); len(lost) > 0 {
			b.Fatalf("%d nodes turned NotReady after the leader settled (first: %s): the leader's CPU would count passes over every workload", len(lost), lost[0].Message)
		}
		rss, _ := RSS(c.PID())
		if err := <-profiled; err != nil {
			b.Error(err)
		}
		busy := ticksToMs(end-start) - ticksToMs(idleEnd-idleStart)*float64(elapsed)/float64(idle)
		perBeat := busy / float64(len(latencies))
		slices.Sort(latencies)
		p50, p99 := latencies[len(latencies)/2], latencies[len(latencies)*99/100]
		share := 100 * busy / float64(elapsed.Milliseconds())
		b.ReportMetric(perBeat, "leader-cpu-ms/heartbeat")
		b.ReportMetric(share, "leader-cpu-%")
		b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(rss)/(1<<20), "leader-rss-MiB")
		fmt.Fprintf(os.Stderr, "heartbeats: %d from %d nodes (one per node every %s) over %s with %d workloads: leader CPU %.0f ms (%.0f ms over as long idle), %.3f ms per heartbeat, %.1f%% of one core; latency p50 %s, p99 %s; leader RSS %.1f MiB\n",
			len(latencies), nodes, tick, elapsed.Round(time.Millisecond), hbWorkloads, ticksToMs(end-start), ticksToMs(idleEnd-idleStart),
			perBeat, share, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), float64(rss)/(1<<20))
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
	mu     sync.Mutex // guards body
	url    string
	client *http.Client
	body   map[string]any
}

// simulatedNodes joins n nodes through the leader's join API, as kat-agent
// join does (token from the leader's data dir, a CSR of a fresh key), and
// gives each its own mTLS client and a fixed status to report.
func simulatedNodes(tb testing.TB, c *Cluster, n int) []*simNode {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join(c.DataDir, "join.token"))
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := pki.ParseJoinToken(string(raw))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	apiURL := "https://127.0.0.1:" + strconv.Itoa(c.APIPort)
	// Nodes join a few at a time, as a fleet's agents do: one after
	// another, 1,000 joins outlast the deadline on a busy machine. The
	// joins are set-up; no heartbeat is measured before all have joined.
	type joined struct {
		keyPEM []byte
		resp   *api.JoinResponse
		err    error
	}
	joins := make([]joined, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("sim-%04d", i)
			j := &joins[i]
			if j.keyPEM, j.err = pki.NewKeyPEM(); j.err != nil {
				return
			}
			csr, err := pki.CSRForKey(j.keyPEM, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}})
			if err != nil {
				j.err = err
				return
			}
			// A join that failed (etcd refuses a write that raced another
			// join's new etcd user) is asked again, as an operator would;
			// joining again with the same UID is allowed.
			for range 5 {
				j.resp, j.err = apiclient.Join(ctx, apiURL, tok, api.JoinRequest{NodeName: name, NodeUID: name, CSR: string(csr),
					AdvertiseAddress: "127.0.0.1", AgentPort: 1})
				if j.err == nil || ctx.Err() != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	out := make([]*simNode, 0, n)
	for i := range n {
		name := fmt.Sprintf("sim-%04d", i)
		if err := joins[i].err; err != nil {
			tb.Fatalf("join %s: %v", name, err)
		}
		resp := joins[i].resp
		cert, err := tls.X509KeyPair([]byte(resp.Certificate), joins[i].keyPEM)
		if err != nil {
			tb.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(resp.CA))
		// HTTP/1.1 on a kept-alive connection, as an agent reports
		// (apiclient.Config.HTTP1).
		tr := apiclient.HTTP1Only(&http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: &tls.Config{
			RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
		var instances, containers []map[string]any
		for j := range 2 {
			id := fmt.Sprintf("%s-inst-%d", name, j)
			instances = append(instances, map[string]any{
				"workloadName": "ext", "namespace": "default", "instanceID": id, "generation": 1, "specHash": "h",
				"containerID": strings.Repeat("c", 64), "image": "localhost/kat-base:latest", "state": "running",
				"phase": "Running", "exitCode": 0, "healthStatus": "not_applicable", "restarts": 0,
				"startedAt": "2026-11-23T00:00:00Z",
			})
			containers = append(containers, map[string]any{"namespace": "default", "workload": "ext", "instanceID": id,
				"cpuMillis": 0, "memoryBytes": 52428800, "diskReadBytes": 4096, "diskWriteBytes": 8192,
				"networkRxBytes": 1 << 20, "networkTxBytes": 1 << 19})
		}
		out = append(out, &simNode{
			name: name, url: apiURL + "/v1alpha1/nodes/" + name + "/status",
			client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
			body: map[string]any{
				"nodeName": name, "nodeUID": name,
				"resources": map[string]any{"capacity": map[string]string{"cpu": "2000m", "memory": "4096Mi"},
					"allocatable": map[string]string{"cpu": "1800m", "memory": "3686Mi"}},
				"workloadInstances": instances,
				"conditions":        []map[string]string{{"type": "RuntimeReady", "status": "True", "reason": "RuntimeAvailable", "lastTransitionTime": "2026-11-23T00:00:00Z"}},
				"usage": map[string]any{"cpuMillis": 0, "memoryBytes": 1 << 30, "diskReadBytes": 1 << 30, "diskWriteBytes": 1 << 29,
					"networkRxBytes": 1 << 30, "networkTxBytes": 1 << 28, "containers": containers},
			},
		})
	}
	return out
}

// beat posts the node's status with a new timestamp; anything but a 2xx
// is an error.
func (n *simNode) beat(round int) error {
	n.mu.Lock()
	n.body["timestamp"] = time.Now().Unix() + int64(round)
	// Usage differs at every beat, as a real agent's sample does.
	u := n.body["usage"].(map[string]any)
	u["sampledAt"], u["cpuMillis"] = n.body["timestamp"], 100+round
	for i, c := range u["containers"].([]map[string]any) {
		c["cpuMillis"] = 10*i + round
	}
	b, err := json.Marshal(n.body)
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("heartbeat of %s: %w", n.name, err)
	}
	req, err := http.NewRequest(http.MethodPost, n.url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("heartbeat of %s: %w", n.name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("heartbeat of %s: %w", n.name, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("heartbeat of %s: %s", n.name, resp.Status)
	}
	return nil
}

// beatPaced has every node beat once per tick for rounds ticks (rounds
// numbered from 1), evenly spread from now, each beat from its own
// goroutine as real agents beat independently: a slow answer delays no
// other beat, so no node's beats fall behind its tick. It returns every
// beat's latency, once all are answered, or the first error.
func beatPaced(sims []*simNode, tick time.Duration, rounds int) ([]time.Duration, error) {
	latencies := make([]time.Duration, rounds*len(sims))
	errs := make([]error, len(latencies))
	gap := tick / time.Duration(len(sims))
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range latencies {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * gap))) //nolint:forbidigo // pacing the simulated agents
		wg.Add(1)
		go func(n *simNode, round int) {
			defer wg.Done()
			sent := time.Now()
			errs[i] = n.beat(round)
			latencies[i] = time.Since(sent)
		}(sims[i%len(sims)], 1+i/len(sims))
	}
	wg.Wait()
	return latencies, errors.Join(errs...)
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
