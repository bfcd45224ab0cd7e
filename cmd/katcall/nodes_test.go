package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// realCluster is a real API server over embedded etcd with nodes n1 (Ready,
// with a Service, a DaemonService and a Job instance) and n2 (never beat),
// and a katcall configuration for it.
type realCluster struct {
	repo   *resources.Repo
	config string
	// ca signs metrics certificates, as the leader's cluster CA does.
	ca *pki.CA
}

func newRealCluster(t *testing.T) *realCluster {
	t.Helper()
	ctx := context.Background()
	repo := resources.New(storetest.New(t))
	cfg, err := quadlet.ParseClusterConfiguration("cluster.kat", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: ClusterConfiguration\n"+
		"metadata: {name: test}\nspec: {clusterCIDR: 10.100.0.0/16, serviceCIDR: 10.96.0.0/16}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.InitCluster(ctx, resources.ClusterInit{UID: "uid", Config: *cfg, AdminToken: "admin", JoinToken: "j"}); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("kat-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.AgeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	s, err := apiserver.New(apiserver.Config{Repo: repo, AdminTokenHash: resources.HashToken("admin"), RateLimit: -1,
		CACertPEM: ca.CertPEM, Secrets: &apiserver.SecretKeys{Identity: id, KeyID: "k", Sealer: ca},
		SignMetricsCert: func(_ context.Context, name string, csrPEM []byte, validity time.Duration) ([]byte, error) {
			return ca.SignCSR(csrPEM, pki.LeafRequest{CommonName: api.MetricsCertPrefix + name, Validity: validity})
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	config := filepath.Join(t.TempDir(), "katcall.yaml")
	doc := fmt.Sprintf("server: %s\ntoken: admin\ncertificateAuthorityData: |\n  %s\n", srv.URL,
		strings.ReplaceAll(strings.TrimSpace(string(caPEM)), "\n", "\n  "))
	if err := os.WriteFile(config, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2"} {
		// n2 is an etcd member (it may lead); n1 a worker.
		reg := api.NodeRegistration{Name: n, Labels: map[string]string{resources.NodeNameLabel: n}, EtcdMember: n == "n2"}
		if err := repo.PutNodeRegistration(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	if err := repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(),
		Resources: api.NodeResources{Allocatable: api.ResourceList{CPU: "2", Memory: "4Gi"}}}); err != nil {
		t.Fatal(err)
	}
	as := []api.Assignment{
		{InstanceID: "web-1", Workload: "web", Type: "Service", CPUMillis: 500, MemoryBytes: 256 << 20},
		{InstanceID: "mon-1", Workload: "mon", Type: "DaemonService", CPUMillis: 1000},
		{InstanceID: "job-1", Workload: "job", Type: "Job", MemoryBytes: 1 << 30},
	}
	for i := range as {
		as[i].Node, as[i].Namespace = "n1", "default"
	}
	if _, err := repo.WriteAssignments(ctx, as, nil); err != nil {
		t.Fatal(err)
	}
	return &realCluster{repo: repo, config: config, ca: ca}
}

// nodes renders every node's registration and status, to compare.
func (c *realCluster) nodes(t *testing.T) string {
	t.Helper()
	nodes, err := c.repo.ListNodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// katcall runs katcall with args against the cluster and returns its exit
// code and output.
func (c *realCluster) katcall(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"--config", c.config}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// TestNodeCommands: katcall's node verbs change the node, get nodes shows
// it, and bad arguments are refused naming the argument.
func TestNodeCommands(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	for _, args := range [][]string{
		{"cordon", "n1"},
		{"label", "node", "n1", "zone=a", "disk=ssd"},
		{"label", "nodes", "n1", "disk-"},
		{"taint", "node", "n1", "gpu=yes:NoSchedule", "slow:PreferNoSchedule"},
		{"taint", "no", "n1", "slow-"},
		{"drain", "n2"},
	} {
		if code, out, errOut := c.katcall(args...); code != 0 {
			t.Fatalf("katcall %s: exit %d: %s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	reg, err := c.repo.GetNodeRegistration(context.Background(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !reg.Unschedulable || reg.Draining || reg.Labels["zone"] != "a" || reg.Labels["disk"] != "" ||
		len(reg.Taints) != 1 || reg.Taints[0].String() != "gpu=yes:NoSchedule" {
		t.Fatalf("n1 registration: %+v", reg)
	}

	code, out, errOut := c.katcall("get", "nodes")
	if code != 0 {
		t.Fatalf("get nodes: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME STATUS ROLE LABELS TAINTS ALLOCATABLE REQUESTED INSTANCES HEARTBEAT" {
		t.Fatalf("header: %q", lines[0])
	}
	row := strings.Fields(lines[1])
	if strings.Join(row[:8], " ") != "n1 Ready,Cordoned agent zone=a gpu=yes:NoSchedule 2/4Gi 1500m/1280Mi 3" || !strings.HasSuffix(row[8], "s") {
		t.Fatalf("n1 row: %q", lines[1])
	}
	if row := strings.Fields(lines[2]); strings.Join(row, " ") != "n2 Unknown,Draining member - - -/- 0/0 0 -" {
		t.Fatalf("n2 row: %q", lines[2])
	}

	code, out, _ = c.katcall("get", "node", "n1", "-o", "json")
	var nodes []api.Node
	if err := json.Unmarshal([]byte(out), &nodes); code != 0 || err != nil || len(nodes) != 1 {
		t.Fatalf("get node n1 -o json: %d %v %s", code, err, out)
	}
	if n := nodes[0]; !n.Unschedulable || n.Status != api.NodeReady || n.Requested.CPUMillis != 1500 || n.Instances != 3 ||
		n.Active["Job"] != 1 || n.HeartbeatAgeSeconds == nil || len(n.Taints) != 1 {
		t.Fatalf("n1 as JSON: %+v", n)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"label", "node", "n1", "zone"}, `label "zone": want KEY=VALUE to set a label or KEY- to remove it`},
		{[]string{"label", "node", "n1", "=v"}, `label "=v": the key is empty`},
		{[]string{"label", "node", "n1", "a=1", "a-"}, `label "a-": key a is given twice`},
		{[]string{"label", "workload", "n1", "a=1"}, `label: "workload": only nodes can be given labels`},
		{[]string{"label", "node", "n1", "bad key=1"}, `labels["bad key"]: key "bad key" must not contain spaces`},
		{[]string{"taint", "node", "n1", "k=v"}, `taint "k=v": no effect`},
		{[]string{"taint", "node", "n1", "k=v:NoExecute"}, `taint "k=v:NoExecute": effect "NoExecute" must be NoSchedule or PreferNoSchedule`},
		{[]string{"taint", "node", "n1", "k=v:NoSchedule-"}, `taint "k=v:NoSchedule-": a taint is removed by KEY:EFFECT- or KEY-, without its value`},
		{[]string{"taint", "node", "n1", "gpu=no:NoSchedule"}, "node n1 already has taint gpu=yes:NoSchedule; overwrite it with --overwrite"},
		{[]string{"taint", "node", "n1", "nope-"}, "node n1 has no taint nope"},
		{[]string{"cordon", "nope"}, "node nope not found"},
		{[]string{"cordon"}, "cordon: want NODE, got 0 arguments"},
		{[]string{"taint", "node", "n1"}, "taint: want node NODE KEY[=VALUE]:EFFECT... or KEY[:EFFECT]-..., got 2 arguments"},
		{[]string{"drain", "n1", "--wait", "--timeout", "0s"}, "--timeout: 0s must be positive"},
		{[]string{"delete", "node", "n1"}, "node n1 is Ready and still has 3 instances: drain it first (katcall drain n1 --wait)"},
	} {
		before := c.nodes(t)
		code, _, errOut := c.katcall(tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("katcall %s: exit %d, stderr %q, want %q", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
		if after := c.nodes(t); after != before {
			t.Errorf("katcall %s changed the nodes", strings.Join(tc.args, " "))
		}
	}

	if code, out, errOut := c.katcall("delete", "node", "n1", "--force"); code != 0 || !strings.Contains(out, "node n1 deleted") {
		t.Fatalf("delete node n1 --force: %d %s %s", code, out, errOut)
	}
	if _, err := c.repo.GetNodeRegistration(context.Background(), "n1"); err == nil {
		t.Fatal("n1 is still registered")
	}
}

// TestDrainWait: drain --wait reports what is left as the node's Service
// and DaemonService instances go and its Job instance ends, and succeeds
// then; with instances that stay it fails when --timeout passes.
func TestDrainWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newRealCluster(t)
	var out, errOut testenv.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--config", c.config, "drain", "n1", "--wait", "--timeout", "1m", "--poll-interval", "20ms"}, &out, &errOut)
	}()
	waitFor := func(line string) {
		t.Helper()
		polltest.Until(t, 30*time.Second, "drain prints "+line, func() bool { return strings.Contains(out.String(), line+"\n") })
	}
	remove := func(id string) {
		t.Helper()
		if _, err := c.repo.WriteAssignments(ctx, nil, []api.Assignment{{Node: "n1", InstanceID: id}}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("node n1: 3 instances left (1 Service, 1 DaemonService, 1 Job)")
	remove("web-1")
	waitFor("node n1: 2 instances left (1 DaemonService, 1 Job)")
	remove("mon-1")
	waitFor("node n1: 1 instance left (1 Job)")
	// The Job instance ends: its assignment stays, its agent reports it.
	if err := c.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(),
		WorkloadInstances: []api.InstanceStatus{{InstanceID: "job-1", Phase: api.InstanceSucceeded}}}); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || !strings.HasSuffix(out.String(), "node n1 drained\n") {
		t.Fatalf("drain --wait: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if reg, err := c.repo.GetNodeRegistration(ctx, "n1"); err != nil || !reg.Draining || !reg.Unschedulable {
		t.Fatalf("n1 after drain: %+v, %v", reg, err)
	}

	// A Service instance that never moves: the wait gives up.
	if _, err := c.repo.WriteAssignments(ctx, []api.Assignment{{Node: "n1", InstanceID: "web-2", Namespace: "default", Workload: "web", Type: "Service"}}, nil); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := c.katcall("drain", "n1", "--wait", "--timeout", "100ms", "--poll-interval", "20ms")
	if code != 1 || !strings.Contains(stderr, "node n1: not drained after --timeout 100ms (1 instance left (1 Service)); the drain goes on") {
		t.Fatalf("drain --wait with a stuck instance: exit %d\n%s%s", code, stdout, stderr)
	}
}
