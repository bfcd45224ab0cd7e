package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/detach/rejoin"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// detachTimeout bounds each wait of TestDetachAndRejoin: a bound for a
// hang, not a speed check (the leader and the detached plane each start an
// embedded etcd on a busy machine).
const detachTimeout = 90 * time.Second

// katcallClient is an admin client of the API a katcall.yaml names.
func katcallClient(t *testing.T, path string) *apiclient.Client {
	t.Helper()
	var kc katcallConfig
	must(t, yaml.Unmarshal(readFile(t, path), &kc))
	c, err := apiclient.New(apiclient.Config{Server: kc.Server, Token: kc.Token, CAData: []byte(kc.CertificateAuthorityData)})
	must(t, err)
	return c
}

// TestDetachAndRejoin: a worker that joined with --parent-cluster-name and
// loses its cluster (the leader stops) detaches after
// nodeLossTimeoutSeconds: its own control plane (on the ports
// --detached-*-port name; its first start fails on a taken port and is
// tried again, which status tells), seeded with the workload
// and the instance it ran (the same instance, left in place by the
// plane's leader), serves the API with a katcall.yaml in its data
// directory; status says detached, since when, from which cluster; a
// workload applied there is pinned to the node. Once the cluster is back
// the node hands that workload back (pinned, API-owned), stops its plane
// and is a worker again, its heartbeats reaching the cluster.
func TestDetachAndRejoin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	lo := testOptions(t, dir)
	cfg := strings.Replace(string(readFile(t, lo.ConfigPath)), "  agentTickSeconds: 1\n", "  agentTickSeconds: 1\n  nodeLossTimeoutSeconds: 3\n", 1)
	must(t, os.WriteFile(lo.ConfigPath, []byte(cfg), 0o600))
	// A group of the test's own: other tests' leaders answer nothing.
	lo.RejoinGroup = fmt.Sprintf("239.255.84.75:%d", freePorts(t, 1)[0])
	leaderLogs := &testenv.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("leader log:\n%s", leaderLogs)
		}
	})
	// runCluster runs the leader until the returned stop, or the test's
	// end.
	runCluster := func() (*Node, func()) {
		ld, err := Open(ctx, lo, zerolog.New(leaderLogs))
		must(t, err)
		lctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ld.Run(lctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("leader Run: %v", err)
				}
				ld.Close()
			})
		}
		t.Cleanup(stop)
		return ld, stop
	}
	ld, stopLeader := runCluster()
	polltest.UntilErr(t, leaderStartTimeout, "the leader serves the API", func() error {
		_, err := os.Stat(ld.KatcallConfigPath())
		return err
	})

	wo := workerOptions(t, t.TempDir(), "w1", lo, filepath.Join(lo.DataDir, "join.token"))
	wo.ParentClusterName, wo.RejoinGroup = "nodetest", lo.RejoinGroup
	w, err := Open(ctx, wo, zerolog.Nop())
	must(t, err)
	w.Close()
	// Resumed with the ports its control plane will use while detached
	// (--detached-*-port: the tests' nodes share one network namespace).
	resume := wo
	resume.TokenFile, resume.LeaderAPI = "", ""
	p := freePorts(t, 3)
	resume.Detached = DetachedPorts{APIPort: p[0], EtcdClientPort: p[1], EtcdPeerPort: p[2]}
	logs := &testenv.SyncBuffer{}
	w, err = Open(ctx, resume, zerolog.New(logs))
	must(t, err)
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	t.Cleanup(func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Errorf("worker Run: %v", err)
		}
		w.Close()
	})

	// The cluster's workload, its one instance placed on w1.
	files := map[string][]byte{quadlet.WorkloadFile: []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: kept, namespace: default}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: 1
  restartPolicy: {condition: Always}
  nodeSelector: {kat.dws.rip/nodeName: w1}
  container: {command: [sleep, "3600"]}
`)}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	must(t, err)
	if _, err := ld.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	var inst api.Assignment
	polltest.UntilErr(t, detachTimeout, "the leader places the instance on w1", func() error {
		as, err := ld.repo.ListAssignments(ctx, "w1")
		if err != nil {
			return fmt.Errorf("list assignments of w1: %w", err)
		}
		if len(as) != 1 {
			return fmt.Errorf("assignments of w1: %v", as)
		}
		inst = as[0]
		return nil
	})
	polltest.UntilErr(t, detachTimeout, "the worker's agent reports its instance", func() error {
		st, err := ld.repo.GetNodeStatus(ctx, "w1")
		if err != nil {
			return err
		}
		for _, i := range st.WorkloadInstances {
			if i.InstanceID == inst.InstanceID {
				return nil
			}
		}
		return fmt.Errorf("instances reported: %+v", st.WorkloadInstances)
	})

	// The detached plane's API port is taken: its first start fails, and
	// is tried again once the port is free.
	hold, err := net.Listen("tcp", net.JoinHostPort("", fmt.Sprint(p[0])))
	must(t, err)
	// The link is lost: the leader stops.
	lost := time.Now()
	stopLeader()
	polltest.UntilErr(t, detachTimeout, "the plane's failed start is logged", func() error {
		if !strings.Contains(logs.String(), "the node's own control plane failed while detached") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	must(t, hold.Close())

	var local *apiclient.Client
	polltest.UntilErr(t, detachTimeout, "the worker detaches and serves its own API", func() error {
		if _, err := os.Stat(w.DetachedConfigPath()); err != nil {
			return err
		}
		local = katcallClient(t, w.DetachedConfigPath())
		st, err := local.Status(ctx)
		if err != nil {
			return err
		}
		if d := st.Detached; d == nil || d.Node != "w1" || d.ParentCluster != "nodetest" || d.Since.Before(lost.Add(-time.Second)) ||
			d.StartFailures < 1 || !strings.Contains(d.LastStartError, "listen for the API") {
			return fmt.Errorf("status of the detached node: %+v", st.Detached)
		}
		return nil
	})
	t.Logf("link lost -> detached and serving (after a failed start): %s", time.Since(lost).Round(time.Millisecond))
	// The plane was seeded with the workload and its instance, and its
	// leader keeps that instance (the same one, alone) once it has
	// derived the workload's status.
	polltest.UntilErr(t, detachTimeout, "the detached plane derives the seeded workload's status", func() error {
		got, err := local.GetWorkload(ctx, "default", "kept")
		if err != nil {
			return err
		}
		if got.Status.Phase == "" {
			return fmt.Errorf("no status yet")
		}
		return nil
	})
	detail, err := local.WorkloadStatus(ctx, "default", "kept")
	if err != nil || len(detail.Instances) != 1 || detail.Instances[0].InstanceID != inst.InstanceID {
		t.Fatalf("instances of the seeded workload on the detached plane: %+v, %v; want only %s", detail, err, inst.InstanceID)
	}

	// A workload applied locally is pinned to the node.
	if _, err := local.ApplyWorkload(ctx, "default", "fresh", quadletArchive(t, "fresh"), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := local.GetWorkloadFile(ctx, "default", "fresh", quadlet.WorkloadFile)
	must(t, err)
	if !strings.Contains(string(b), resources.NodeNameLabel) {
		t.Fatalf("a workload applied to the detached node is not pinned:\n%s", b)
	}
	var freshID string
	polltest.UntilErr(t, detachTimeout, "the detached plane places the local workload on w1", func() error {
		d, err := local.WorkloadStatus(ctx, "default", "fresh")
		if err != nil {
			return err
		}
		if len(d.Instances) != 1 || d.Instances[0].Node != "w1" {
			return fmt.Errorf("instances of fresh: %+v", d.Instances)
		}
		freshID = d.Instances[0].InstanceID
		return nil
	})

	// The link is back: the leader runs again.
	back := time.Now()
	ld, _ = runCluster()
	polltest.UntilErr(t, detachTimeout, "the node hands back its workload and is a worker again", func() error {
		got, err := ld.repo.GetWorkload(ctx, "default", "fresh")
		if err != nil {
			return err
		}
		if got.Owner != api.APIOwner() {
			return fmt.Errorf("owner %+v", got.Owner)
		}
		if _, err := os.Stat(w.DetachedConfigPath()); err == nil {
			return fmt.Errorf("the detached plane still runs")
		}
		return nil
	})
	t.Logf("cluster back -> handed back and plane stopped: %s", time.Since(back).Round(time.Millisecond))
	// The cluster's member answers a rejoin request signed by w1 on the
	// LAN with its API address.
	signer, err := rejoin.NewSigner(w.leaf)
	must(t, err)
	group, err := net.ResolveUDPAddr("udp4", lo.RejoinGroup)
	must(t, err)
	conn, err := net.ListenPacket("udp4", ":0")
	must(t, err)
	defer conn.Close()
	polltest.UntilErr(t, detachTimeout, "a member answers w1's rejoin request", func() error {
		req, b, err := signer.NewRequest(w.state.ClusterUID, "nodetest", "w1", time.Now())
		if err != nil {
			return err
		}
		a, err := rejoin.Ask(ctx, conn, group, b, req, rejoin.NewVerifier(w.ca.Pool(), w.state.ClusterUID), time.Second)
		if err != nil {
			return err
		}
		if a.Member != "n1" || a.APIURL != ld.apiURL() {
			return fmt.Errorf("answer %+v", a)
		}
		return nil
	})
	mf, err := ld.repo.GetManifest(ctx, "default", "fresh", quadlet.WorkloadFile)
	must(t, err)
	if !strings.Contains(string(mf), resources.NodeNameLabel) {
		t.Fatalf("the handed-back workload is not pinned:\n%s", mf)
	}
	if _, err := ld.repo.GetWorkload(ctx, "default", "kept"); err != nil {
		t.Fatalf("the cluster's own workload: %v", err)
	}
	// The local instance is the cluster's now, as it ran: the same
	// instance, no new one placed.
	freshOnly := func(when string) {
		t.Helper()
		as, err := ld.repo.ListWorkloadAssignments(ctx, "default", "fresh")
		if err != nil || len(as) != 1 || as[0].InstanceID != freshID || as[0].Node != "w1" {
			t.Fatalf("%s: the cluster's instances of fresh %+v (%v), want only %s on w1 (adopted); the worker's log:\n%s", when, as, err, freshID, logs)
		}
	}
	freshOnly("handed back")
	before, err := ld.st.Get(ctx, resources.NodeHeartbeatKey("w1"))
	must(t, err)
	polltest.UntilErr(t, detachTimeout, "the worker's heartbeats reach the cluster again", func() error {
		kv, err := ld.st.Get(ctx, resources.NodeHeartbeatKey("w1"))
		if err != nil {
			return err
		}
		if kv.Version == before.Version {
			return fmt.Errorf("no new heartbeat")
		}
		return nil
	})
	polltest.UntilErr(t, detachTimeout, "the cluster's leader derives the status of fresh", func() error {
		wl, err := ld.repo.GetWorkload(ctx, "default", "fresh")
		if err != nil {
			return err
		}
		if wl.Status.ObservedGeneration != wl.Generation {
			return fmt.Errorf("status of generation %d, want %d", wl.Status.ObservedGeneration, wl.Generation)
		}
		return nil
	})
	freshOnly("a worker again")
}

func quadletArchive(t *testing.T, name string) []byte {
	t.Helper()
	b := new(bytes.Buffer)
	must(t, quadlet.WriteArchive(b, map[string][]byte{quadlet.WorkloadFile: fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: default}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: 1
  restartPolicy: {condition: Always}
  container: {command: [sleep, "3600"]}
`, name)}))
	return b.Bytes()
}

// TestDetachedPortsValidate: the detached control plane's port flags are
// checked with the rest: out of range, or one port given twice among them
// and --agent-port, each refused naming its flag; distinct ports pass.
func TestDetachedPortsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		agent int
		ports DetachedPorts
		want  []string
	}{
		{name: "distinct", agent: 9116, ports: DetachedPorts{APIPort: 19115, EtcdClientPort: 12379, EtcdPeerPort: 12380}},
		{name: "out of range", ports: DetachedPorts{APIPort: 70000, EtcdPeerPort: -1},
			want: []string{"--detached-api-port: 70000 is not a port", "--detached-etcd-peer-port: -1 is not a port"}},
		{name: "taken twice", agent: 9116, ports: DetachedPorts{APIPort: 9116, EtcdClientPort: 12379, EtcdPeerPort: 12379},
			want: []string{"--detached-api-port: port 9116 is --agent-port's too", "--detached-etcd-peer-port: port 12379 is --detached-etcd-client-port's too"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := Options{DataDir: t.TempDir(), AgentPort: tc.agent, Detached: tc.ports, Agent: DefaultAgentOptions()}
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want it to say %q", err, w)
				}
			}
		})
	}
}
