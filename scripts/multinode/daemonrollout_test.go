package multinode

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// applyDaemon applies DaemonService default/dsroll whose container has
// VERSION=version in its environment and whose update verifies each node by
// failing when VERSION is "bad".
func (c *testCluster) applyDaemon(t *testing.T, version string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "dsroll")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	kat := `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: dsroll, namespace: default}
spec:
  type: DaemonService
  updateStrategy:
    verify: {command: ["/bin/sh", "-c", "echo checking $VERSION; test \"$VERSION\" != bad"], timeoutSeconds: 10}
    # The failed version stays desired, so the test sees the update's
    # record as it stopped (with it on, the last good generation's files
    # would be applied again at once).
    autoRollback: false
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container:
    command: ["/bin/sh", "-c", "exec sleep 100000"]
    env: [{name: VERSION, value: "` + version + `"}]
    stopGracePeriodSeconds: 0
`
	if err := os.WriteFile(filepath.Join(dir, "workload.kat"), []byte(kat), 0o644); err != nil {
		t.Fatal(err)
	}
	c.katcall(t, "apply", "-f", dir)
}

// daemonDetail is katcall status default/dsroll -o json.
func (c *testCluster) daemonDetail(t *testing.T) (api.WorkloadDetail, error) {
	t.Helper()
	return c.detail(t, "dsroll")
}

// containerIDs lists the running containers of dsroll on each host.
func (c *testCluster) containerIDs(t *testing.T) ([][]string, error) {
	t.Helper()
	out := make([][]string, len(c.Hosts))
	for i, h := range c.Hosts {
		ids, err := h.Containers(t.Context(), "label=kat.workload=dsroll", "status=running")
		if err != nil {
			return nil, err
		}
		slices.Sort(ids)
		out[i] = ids
	}
	return out, nil
}

func steps(r *api.DaemonRollout) string {
	if r == nil {
		return "no rollout"
	}
	var s []string
	for _, n := range r.Nodes {
		s = append(s, n.Node+"="+n.Step)
	}
	return r.Phase + " " + strings.Join(s, " ")
}

// TestDaemonServiceNodeByNode updates a DaemonService on 3 nodes twice: a
// version that fails its verify command is stopped on the first node and
// rolled back there, the other two never getting a new instance (their
// assignments and containers stay as they were throughout); then a good
// version goes over the nodes one at a time, in order. katcall status
// NS/NAME shows each node's step.
func TestDaemonServiceNodeByNode(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "dr", hosts: 3})

	c.applyDaemon(t, "1")
	c.waitRunning(t, 2*time.Minute, "dsroll", "1 running on every host", equal(1, 1, 1))
	before, err := c.containerIDs(t)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.daemonDetail(t)
	if err != nil {
		t.Fatal(err)
	}
	gen1 := d.Generation

	t.Run("a version failing verification is rolled back on the first node and never reaches the others", func(t *testing.T) {
		c.applyDaemon(t, "bad")
		start := time.Now()
		var seen []string
		polltest.UntilErr(t, 3*time.Minute, "the update Failed", func() error {
			d, err := c.daemonDetail(t)
			if err != nil {
				return err
			}
			// Every sample: node2 and node3 have only their generation-1
			// instance and the same container as before.
			for _, in := range d.Instances {
				if in.Node != "node1" && in.Generation != gen1 {
					t.Fatalf("%s got instance %s of generation %d, want it never touched", in.Node, in.InstanceID, in.Generation)
				}
			}
			ids, err := c.containerIDs(t)
			if err != nil {
				return err
			}
			for i := 1; i < 3; i++ {
				if !slices.Equal(ids[i], before[i]) {
					t.Fatalf("%s runs containers %v during the update, want %v throughout", c.Hosts[i].Name, ids[i], before[i])
				}
			}
			if s := steps(d.DaemonRollout); len(seen) == 0 || seen[len(seen)-1] != s {
				seen = append(seen, s)
			}
			if d.DaemonRollout == nil || d.DaemonRollout.Phase != api.RolloutFailed {
				return fmt.Errorf("rollout %s", steps(d.DaemonRollout))
			}
			return nil
		})
		t.Logf("update stopped and rolled back %s after the apply; steps seen: %s", time.Since(start).Round(time.Millisecond),
			strings.Join(seen, " -> "))
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.Contains(s, "node1=updating") }) {
			t.Errorf("never saw node1 updating: %v", seen)
		}
		d, err := c.daemonDetail(t)
		if err != nil {
			t.Fatal(err)
		}
		if got := steps(d.DaemonRollout); got != "Failed node1=rolled back node2=pending node3=pending" {
			t.Errorf("rollout %s, want Failed node1=rolled back node2=pending node3=pending", got)
		}
		if msg := d.DaemonRollout.Nodes[0].Message; !strings.Contains(msg, "verify command") || !strings.Contains(msg, "exit 1: checking bad") {
			t.Errorf("node1's message %q, want the verify command's failure and output", msg)
		}
		// The workload tells the truth: its rollout failed, and why.
		polltest.UntilErr(t, 30*time.Second, "the workload's RolloutFailed condition", func() error {
			d, err := c.daemonDetail(t)
			if err != nil {
				return err
			}
			for _, cd := range d.Status.Conditions {
				if cd.Type == "RolloutFailed" && cd.Status == "True" && cd.Reason == "NodeUpdateFailed" && strings.Contains(cd.Message, "node1") {
					return nil
				}
			}
			return fmt.Errorf("conditions %+v", d.Status.Conditions)
		})
		// The new instance on node1 leaves first (the drain delay), then goes.
		polltest.UntilErr(t, time.Minute, "only generation-1 instances left", func() error {
			d, err := c.daemonDetail(t)
			if err != nil {
				return err
			}
			for _, in := range d.Instances {
				if in.Generation != gen1 {
					return fmt.Errorf("instance %s on %s of generation %d remains", in.InstanceID, in.Node, in.Generation)
				}
			}
			return nil
		})
		ids := c.waitRunningIDs(t, before)
		t.Logf("containers per host after the rollback: %v", ids)
		out := c.katcall(t, "status", "default/dsroll")
		t.Logf("katcall status default/dsroll:\n%s", out)
		for _, want := range []string{"Rollout:", "node1", "rolled back", "pending"} {
			if !strings.Contains(out, want) {
				t.Errorf("katcall status does not show %q", want)
			}
		}
		// rollout status ends at once (exit 1) and shows each node's step.
		rout, err := c.Katcall(t.Context(), c.bin.Katcall, "rollout", "status", "default/dsroll", "--timeout", "1m")
		t.Logf("katcall rollout status default/dsroll: %v\n%s", err, rout)
		if err == nil || !strings.Contains(string(rout), "node node1: ") || !strings.Contains(string(rout), ", rolled back") {
			t.Errorf("katcall rollout status after a failed node-by-node update: %v, want exit 1 and node1's step rolled back", err)
		}
	})

	t.Run("a good version goes node by node, in order", func(t *testing.T) {
		c.applyDaemon(t, "3")
		start := time.Now()
		var order []string
		most := 0
		polltest.UntilErr(t, 3*time.Minute, "the update Complete", func() error {
			d, err := c.daemonDetail(t)
			if err != nil {
				return err
			}
			r := d.DaemonRollout
			if r == nil || r.TargetGeneration != d.Generation {
				return fmt.Errorf("rollout %s", steps(r))
			}
			updating := 0
			for _, n := range r.Nodes {
				if n.Step != api.NodeStepPending && !slices.Contains(order, n.Node) {
					order = append(order, n.Node)
				}
				if n.Step == api.NodeStepUpdating {
					updating++
				}
				if n.Step == api.NodeStepFailed || n.Step == api.NodeStepRolledBack {
					t.Fatalf("rollout %s: %s", steps(r), n.Message)
				}
			}
			most = max(most, updating)
			if r.Phase != api.RolloutComplete {
				return fmt.Errorf("rollout %s", steps(r))
			}
			return nil
		})
		t.Logf("3 nodes updated one by one %s after the apply", time.Since(start).Round(time.Millisecond))
		if fmt.Sprint(order) != "[node1 node2 node3]" || most > 1 {
			t.Errorf("nodes started in order %v with at most %d updating at once, want [node1 node2 node3] and 1", order, most)
		}
		c.waitRunning(t, time.Minute, "dsroll", "1 running on every host", equal(1, 1, 1))
		ids, err := c.containerIDs(t)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ids {
			if slices.Equal(ids[i], before[i]) {
				t.Errorf("%s still runs %v, want a new container", c.Hosts[i].Name, ids[i])
			}
		}
		t.Logf("katcall status default/dsroll:\n%s", c.katcall(t, "status", "default/dsroll"))
	})
}

// waitRunningIDs waits until every host runs exactly the containers want
// and returns them.
func (c *testCluster) waitRunningIDs(t *testing.T, want [][]string) [][]string {
	t.Helper()
	var ids [][]string
	polltest.UntilErr(t, time.Minute, "the containers from before the update, and only them", func() error {
		var err error
		if ids, err = c.containerIDs(t); err != nil {
			return err
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			return fmt.Errorf("running %v, want %v", ids, want)
		}
		return nil
	})
	return ids
}
