package multinode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// collectAfterSeconds is the failover cluster's nodeCollectAfterSeconds:
// more than nodeLossSeconds, short enough for a test.
const collectAfterSeconds = 25

// detail is katcall status default/NAME -o json.
func (c *testCluster) detail(t *testing.T, name string) (api.WorkloadDetail, error) {
	t.Helper()
	out, err := c.Katcall(t.Context(), c.bin.Katcall, "status", "default/"+name, "-o", "json")
	if err != nil {
		return api.WorkloadDetail{}, err
	}
	var d api.WorkloadDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return d, fmt.Errorf("decode katcall status: %w\n%s", err, out)
	}
	return d, nil
}

// events is katcall get events -o json.
func (c *testCluster) events(t *testing.T) ([]api.Event, error) {
	t.Helper()
	out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "events", "-o", "json")
	if err != nil {
		return nil, err
	}
	var evs []api.Event
	if err := json.Unmarshal([]byte(out), &evs); err != nil {
		return nil, fmt.Errorf("decode katcall get events: %w\n%s", err, out)
	}
	return evs, nil
}

// hasEvent reports whether an event of reason names text.
func hasEvent(evs []api.Event, reason, text string) bool {
	return slices.ContainsFunc(evs, func(ev api.Event) bool {
		return ev.Reason == reason && strings.Contains(ev.Object+" "+ev.Message, text)
	})
}

// nodeStatus is the STATUS of node name in katcall get nodes, "" when the
// node is not listed.
func (c *testCluster) nodeStatus(t *testing.T, name string) (string, error) {
	t.Helper()
	out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "nodes", "-o", "json")
	if err != nil {
		return "", err
	}
	var nodes []api.Node
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		return "", fmt.Errorf("decode katcall get nodes: %w\n%s", err, out)
	}
	for _, n := range nodes {
		if n.Name == name {
			return n.StatusText(), nil
		}
	}
	return "", nil
}

// TestFailover: on a 3-node cluster (node1 and node2 etcd members, node3 a
// worker), a failed Service instance is replaced on another node with a
// back-off the status shows, and so is one that exits 0 under restart
// condition Never; a worker that departs (kat-agent depart) has its Service
// instances moved at once and its DaemonService instance removed, exits with
// status 10 and is Ready again when its agent starts again; a worker whose
// agent stopped is collected after nodeCollectAfterSeconds; a departing etcd
// member (SIGUSR1) leaves the quorum and its old data directory refuses to
// start. It
// logs the time from a failure to its replacement running and from the
// departure command to the moved instances running.
func TestFailover(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "fo", hosts: 3, members: 3, peers: 2, collectAfter: collectAfterSeconds})

	t.Run("a failed instance is replaced on another node, with a back-off", func(t *testing.T) {
		c.applyKat(t, "crash", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: crash, namespace: default}
spec:
  type: Service
  replicas: 1
  restartPolicy: {condition: Never}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "sleep 2; exit 3"], stopGracePeriodSeconds: 0}
`)
		// Each failure: the failed instance, when it was seen failed,
		// and the replacement seen running.
		type failure struct {
			id, node string
			at       time.Time
		}
		var failures []failure
		var took []time.Duration
		seen := map[string]bool{}
		polltest.UntilErr(t, 45*time.Second, "two failures, each replaced", func() error {
			d, err := c.detail(t, "crash")
			if err != nil {
				return err
			}
			for _, in := range d.Instances {
				switch {
				case in.Status.Phase == api.InstanceFailed && !seen[in.InstanceID]:
					seen[in.InstanceID] = true
					failures = append(failures, failure{id: in.InstanceID, node: in.Node, at: time.Now()})
					t.Logf("%s failed on %s (attempts %d, next try %v)", in.InstanceID, in.Node, d.Status.Attempts, d.Status.NextRetryTime)
				case in.Status.Phase == api.InstanceRunning && len(failures) > len(took) && in.InstanceID != failures[len(took)].id:
					f := failures[len(took)]
					took = append(took, time.Since(f.at))
					t.Logf("%s runs on %s, %s after %s was seen failed", in.InstanceID, in.Node, took[len(took)-1].Round(time.Millisecond), f.id)
					if len(took) == 1 && in.Node == f.node {
						return fmt.Errorf("the replacement of %s runs on %s, where it failed; want another node", f.id, f.node)
					}
				}
			}
			if len(took) < 2 {
				return fmt.Errorf("%d failures seen, %d replacements running", len(failures), len(took))
			}
			return nil
		})
		d, err := c.detail(t, "crash")
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.Attempts < 2 || d.Status.LastReconcileTime == nil {
			t.Errorf("status after 2 replacements: attempts %d, last reconcile %v; want at least 2 and a time", d.Status.Attempts, d.Status.LastReconcileTime)
		}
		t.Logf("from a Failed instance seen to its replacement running (each with the wait its back-off still asked for: see the next try above): %v", took)
		evs, err := c.events(t)
		if err != nil {
			t.Fatal(err)
		}
		if !hasEvent(evs, "InstanceReplaced", failures[0].id) {
			t.Errorf("no InstanceReplaced event names %s", failures[0].id)
		}
		c.katcall(t, "delete", "workload", "default/crash")
	})
	if t.Failed() {
		return
	}

	t.Run("an instance that exits 0 under Never is replaced: replicas keep running", func(t *testing.T) {
		c.applyKat(t, "oneshot", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: oneshot, namespace: default}
spec:
  type: Service
  replicas: 1
  restartPolicy: {condition: Never}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "sleep 1; exit 0"], stopGracePeriodSeconds: 0}
`)
		ids := map[string]bool{}
		polltest.UntilErr(t, 45*time.Second, "two instances that exited 0, each replaced", func() error {
			d, err := c.detail(t, "oneshot")
			if err != nil {
				return err
			}
			for _, in := range d.Instances {
				ids[in.InstanceID] = true
			}
			if len(d.Instances) > 1 {
				return fmt.Errorf("%d instances assigned, want 1 (replicas)", len(d.Instances))
			}
			if len(ids) < 3 {
				return fmt.Errorf("%d instances seen, want the first and two replacements", len(ids))
			}
			return nil
		})
		c.katcall(t, "delete", "workload", "default/oneshot")
	})
	if t.Failed() {
		return
	}

	t.Run("a departing worker's instances move at once, and it comes back", func(t *testing.T) {
		const departing = 2 // node3, a worker
		c.applyKat(t, "mover", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: mover, namespace: default}
spec:
  type: Service
  replicas: 3
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"], stopGracePeriodSeconds: 0}
`)
		c.applyKat(t, "everywhere", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: everywhere, namespace: default}
spec:
  type: DaemonService
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"], stopGracePeriodSeconds: 0}
`)
		c.waitRunning(t, time.Minute, "mover", "one running on every host", equal(1, 1, 1))
		c.waitRunning(t, time.Minute, "everywhere", "one running on every host", equal(1, 1, 1))
		start := time.Now()
		done := make(chan departResult, 1)
		ctx, cancel := context.WithCancel(t.Context())
		go func() { done <- c.depart(ctx, departing) }()
		defer func() { cancel(); <-done }()
		c.waitRunning(t, 30*time.Second, "mover", "3 running on the other nodes", func(n []int) bool {
			return sum(n)-n[departing] == 3
		})
		moved := time.Since(start)
		res := <-done
		done <- res
		took := time.Since(start)
		if res.err != nil {
			t.Fatal(res.err)
		}
		out := res.out
		counts := c.waitRunning(t, 30*time.Second, "mover", "none left on the departed node", func(n []int) bool {
			return sum(n) == 3 && n[departing] == 0
		})
		c.waitRunning(t, 30*time.Second, "everywhere", "none on the departed node", equal(1, 1, 0))
		t.Logf("from kat-agent depart to the moved instance running elsewhere: %s; to the command's end (old containers gone): %s; running per host %v; it printed %q",
			moved.Round(time.Millisecond), took.Round(time.Millisecond), counts, out)
		err := c.agents[departing].Wait(t.Context())
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 10 {
			t.Fatalf("the departed agent ended with %v, want exit status 10", err)
		}
		name := c.Hosts[departing].Name
		if st, err := c.nodeStatus(t, name); err != nil || st != "NotReady,Departed" {
			t.Errorf("katcall get nodes: %s is %q (%v), want NotReady,Departed", name, st, err)
		}
		if d, err := c.detail(t, "everywhere"); err != nil || d.Status.Desired != 2 {
			t.Errorf("the DaemonService's desired count %d (%v), want 2 without the departed node", d.Status.Desired, err)
		}
		a, err := c.StartAgent(t.Context(), departing, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents[departing] = a
		polltest.UntilErr(t, 30*time.Second, name+" Ready again", func() error {
			st, err := c.nodeStatus(t, name)
			if err == nil && st != "Ready" {
				err = fmt.Errorf("%s is %q", name, st)
			}
			return err
		})
		evs, err := c.events(t)
		if err != nil {
			t.Fatal(err)
		}
		for _, reason := range []string{"NodeDeparted", "NodeNotReady", "NodeReady"} {
			if !hasEvent(evs, reason, name) {
				t.Errorf("no %s event names %s", reason, name)
			}
		}
		c.katcall(t, "delete", "workload", "default/mover")
		c.katcall(t, "delete", "workload", "default/everywhere")
	})
	if t.Failed() {
		return
	}

	t.Run("a worker NotReady for long is collected", func(t *testing.T) {
		const lost = 2 // node3
		name := c.Hosts[lost].Name
		if err := c.agents[lost].Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.agents[lost].Wait(t.Context()); err != nil {
			t.Logf("node3's agent ended: %v", err)
		}
		stopped := time.Now()
		polltest.UntilErr(t, time.Duration(nodeLossSeconds+collectAfterSeconds+20)*time.Second, name+" collected", func() error {
			st, err := c.nodeStatus(t, name)
			if err == nil && st != "" {
				err = fmt.Errorf("%s is still listed, %s", name, st)
			}
			return err
		})
		t.Logf("%s collected %s after its agent stopped (nodeLossTimeoutSeconds %d, nodeCollectAfterSeconds %d)", name,
			time.Since(stopped).Round(time.Millisecond), nodeLossSeconds, collectAfterSeconds)
		evs, err := c.events(t)
		if err != nil {
			t.Fatal(err)
		}
		if !hasEvent(evs, "NodeCollected", name) {
			t.Errorf("no NodeCollected event names %s", name)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a departing etcd member (SIGUSR1) leaves the quorum", func(t *testing.T) {
		const member = 1 // node2; node1 stays, the only other member
		signalled := time.Now()
		if err := c.agents[member].Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		err := c.agents[member].Wait(t.Context())
		t.Logf("from SIGUSR1 to the departed member's exit: %s", time.Since(signalled).Round(time.Millisecond))
		if log := string(readFileOrEmpty(c.Hosts[member].AgentLog())); !strings.Contains(log, "departing: left the etcd quorum") {
			t.Errorf("the departed member's log does not say it left the etcd quorum; its end: %.500s", log[max(0, len(log)-500):])
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 10 {
			t.Fatalf("the departed member's agent ended with %v, want exit status 10", err)
		}
		token := strings.TrimSpace(string(readHostFile(t, c.Hosts[0], "admin.token")))
		web := memberHTTP(t, readHostFile(t, c.Hosts[0], filepath.Join("pki", "ca.crt")))
		polltest.UntilErr(t, 30*time.Second, "node1 sees one etcd member", func() error {
			m, err := scrape(t, web, c.Hosts[0], token)
			if v, _ := sample(m, "kat_etcd_members"); err == nil && v != "1" {
				err = fmt.Errorf("kat_etcd_members %q", v)
			}
			return err
		})
		// Its old data directory refuses to start, saying why.
		a, err := c.StartAgent(t.Context(), member, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(t.Context()); err == nil {
			t.Fatal("the member that left the quorum started again from its old data directory")
		}
		if log := string(readFileOrEmpty(c.Hosts[member].AgentLog())); !strings.Contains(log, "left the etcd quorum: to bring the node back, join it again") {
			t.Errorf("the refused start's log does not say why; its end: %.500s", log[max(0, len(log)-500):])
		}
	})
}

// departResult is what kat-agent depart printed, and its error.
type departResult struct {
	out string
	err error
}

// depart runs kat-agent depart for host i's agent until the departure
// ended (the old containers removed).
func (c *testCluster) depart(ctx context.Context, i int) departResult {
	out, err := c.Hosts[i].Command(ctx, c.bin.Agent, "depart", "--data-dir", c.Hosts[i].DataDir, "--timeout", "2m").CombinedOutput()
	if err != nil {
		err = fmt.Errorf("kat-agent depart on %s: %w: %s", c.Hosts[i].Name, err, out)
	}
	return departResult{out: strings.TrimSpace(string(out)), err: err}
}

// readFileOrEmpty returns the file's contents, or nothing when it cannot be
// read.
func readFileOrEmpty(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}
