package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/harness"
)

// katcallIn runs katcall inside host h with the configuration at config
// (a detached node's plane is reached from the node only).
func (c *testCluster) katcallIn(ctx context.Context, h harness.Host, config string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, harness.ExecTimeout)
	defer cancel()
	cmd := h.Command(ctx, c.bin.Katcall, append([]string{"--config", config}, args...)...)
	cmd.Env = append(cmd.Env, "KATCONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("katcall %s in %s: %w: %s", strings.Join(args, " "), h.Name, err, out)
	}
	return string(out), nil
}

// started is the start time of container id on host h as Podman has it:
// a container restarted (or replaced) changes it.
func started(ctx context.Context, h harness.Host, id string) (string, error) {
	out, err := h.Command(ctx, "podman", append(h.PodmanArgs(), "inspect", "--format", "{{.State.StartedAt}}", id)...).Output()
	if err != nil {
		return "", fmt.Errorf("podman inspect %s in %s: %w", id, h.Name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// runningInstances are the instance IDs of the running KAT containers of
// host h, sorted.
func runningInstances(ctx context.Context, h harness.Host) ([]string, error) {
	out, err := h.Command(ctx, "podman", append(h.PodmanArgs(), "ps", "--filter", "label=kat.managed=true",
		"--filter", "status=running", "--format", `{{index .Labels "kat.instance"}}`)...).Output()
	if err != nil {
		return nil, fmt.Errorf("podman ps in %s: %w", h.Name, err)
	}
	ids := strings.Fields(string(out))
	slices.Sort(ids)
	return ids, nil
}

// TestDetachedNode: a worker that joined with --parent-cluster-name is cut
// off (its link down): it detaches (the figure is logged; the wait's bound
// is for a hang), its container never restarted, and serves its own API; a
// workload applied there runs on it. Its link back up, it rejoins:
// the local workload is the cluster's (pinned, API-owned) and its
// container on the node is adopted as it runs, the cluster's own instance
// there was never restarted either, the cluster's Job that ran on the node
// as it was cut off ran to its end there and its run succeeded with that
// one instance, and the cluster's view of the node equals the node's
// containers.
func TestDetachedNode(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	name := fmt.Sprintf("dt%d", os.Getpid())
	c := startCluster(t, clusterSpec{name: "dt", hosts: 2, args: func([]harness.Host) map[string][]string {
		return map[string][]string{"node2": {"--parent-cluster-name", name, "--node-type", "laptop"}}
	}})
	node2 := c.Hosts[1]
	nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
	if err != nil || len(nodes) != 2 || nodes[1].Labels["kat.dws.rip/nodeType"] != "laptop" {
		t.Fatalf("nodes %+v (%v): want node2 labelled kat.dws.rip/nodeType=laptop", nodes, err)
	}
	c.apply(t, "kept", "Service", "\n  replicas: 1\n  nodeSelector: {kat.harness/host: node2}")
	sameKept := sameContainer(t, node2, "kept")
	// A workload with a secret variable, and one built from an app
	// repository: they keep running while detached too.
	c.katcall(t, "secret", "set", "default/db", "--from-literal", "password=detached-sentinel")
	c.applyKat(t, "secretive", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: secretive, namespace: default}
spec:
  type: Service
  replicas: 1
  nodeSelector: {kat.harness/host: node2}
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container:
    name: main
    command: ["/bin/sh", "-c", "exec sleep 100000"]
    env: [{name: DB_PASSWORD, valueFrom: {secretKeyRef: {name: db, key: password}}}]
`)
	app := newConfigRepo(t)
	if err := os.WriteFile(filepath.Join(app.work, "Dockerfile"), []byte("FROM localhost/kat-base:latest\nRUN echo built > /built\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "app"}, {"push", "-q", "origin", "HEAD:main"}} {
		if err := app.git(args...); err != nil {
			t.Fatal(err)
		}
	}
	c.applyFiles(t, "built", map[string]string{"workload.kat": `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: built, namespace: default}
spec:
  type: Service
  replicas: 1
  nodeSelector: {kat.harness/host: node2}
  restartPolicy: {condition: Always}
  source: {git: {repository: "file://` + app.bare + `", branch: main}}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`, "build.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: BuildDefinition\nspec:\n  buildContext: .\n  dockerfilePath: Dockerfile\n"})
	sameSecretive := sameContainer(t, node2, "secretive")
	sameBuilt := sameContainer(t, node2, "built")
	// A Job of the cluster's, running on node2 as it is cut off: it runs
	// to its end while node2 is detached.
	c.applyFiles(t, "batch", map[string]string{"workload.kat": `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: batch, namespace: default}
spec:
  type: Job
  nodeSelector: {kat.harness/host: node2}
  restartPolicy: {condition: Never}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "sleep 15"]}
`, "job.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec:\n  backoffLimit: 0\n"})
	batchID := containerOf(t, node2, "batch")
	batchStart, err := started(t.Context(), node2, batchID)
	if err != nil {
		t.Fatal(err)
	}

	local := filepath.Join(node2.DataDir, "detached", "katcall.yaml")
	cut := time.Now()
	if err := c.SetLink(t.Context(), 1, false); err != nil {
		t.Fatal(err)
	}
	linkUp := false
	t.Cleanup(func() {
		if !linkUp {
			_ = c.SetLink(context.Background(), 1, true)
		}
	})
	var detached time.Duration
	polltest.UntilErr(t, time.Duration(nodeLossSeconds)*time.Second+time.Minute, "node2 detaches and serves its own API", func() error {
		out, err := c.katcallIn(t.Context(), node2, local, "status", "-o", "json")
		if err != nil {
			return err
		}
		var st api.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			return fmt.Errorf("decode status: %w", err)
		}
		if st.Detached == nil || st.Detached.ParentCluster != name || st.Detached.Node != "node2" {
			return fmt.Errorf("status says detached %+v", st.Detached)
		}
		detached = time.Since(cut)
		return nil
	})
	t.Logf("link down -> node2 detached and serving its API: %s (nodeLossTimeoutSeconds %d)", detached.Round(time.Millisecond), nodeLossSeconds)
	sameKept("detached")
	sameSecretive("detached")
	sameBuilt("detached")

	dir := filepath.Join(t.TempDir(), "solo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "workload.kat"), []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: solo, namespace: default}
spec:
  type: Service
  replicas: 1
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.katcallIn(t.Context(), node2, local, "apply", "-f", dir); err != nil {
		t.Fatal(out, err)
	}
	sameSolo := sameContainer(t, node2, "solo")
	sameKept("detached, after a local apply")
	sameSecretive("detached, after a local apply")
	sameBuilt("detached, after a local apply")
	polltest.UntilErr(t, time.Minute, "the cluster's Job ends on node2 while it is detached", func() error {
		ids, err := node2.Containers(t.Context(), "label=kat.workload=batch", "status=exited")
		if err != nil {
			return err
		}
		if len(ids) != 1 || ids[0] != batchID {
			return fmt.Errorf("exited containers of batch: %v, want %s", ids, batchID)
		}
		return nil
	})

	back := time.Now()
	if err := c.SetLink(t.Context(), 1, true); err != nil {
		t.Fatal(err)
	}
	linkUp = true
	var rejoined time.Duration
	polltest.UntilErr(t, 2*time.Minute, "node2 rejoins and hands solo back", func() error {
		if _, err := os.Stat(local); err == nil {
			return fmt.Errorf("node2's own plane still runs")
		}
		d, err := c.detail(t, "solo")
		if err != nil {
			return err
		}
		if d.Owner != api.APIOwner() || d.PinnedNode != "node2" {
			return fmt.Errorf("solo's owner %+v, pinned to %q", d.Owner, d.PinnedNode)
		}
		s, err := c.nodeStatus(t, "node2")
		if err != nil {
			return fmt.Errorf("node2's status: %w", err)
		}
		if s != "Ready" {
			return fmt.Errorf("node2 %q", s)
		}
		rejoined = time.Since(back)
		return nil
	})
	t.Logf("link up -> node2 rejoined, solo handed back: %s", rejoined.Round(time.Millisecond))
	var solo time.Duration
	polltest.UntilErr(t, 2*time.Minute, "solo runs on node2 for the cluster, and the cluster's view of node2 equals its containers", func() error {
		var want []string
		for _, w := range []string{"kept", "solo", "secretive", "built"} {
			d, err := c.detail(t, w)
			if err != nil {
				return err
			}
			for _, in := range d.Instances {
				if in.Node != "node2" || in.Status.Phase != api.InstanceRunning {
					return fmt.Errorf("%s: instance %s on %s %s", w, in.InstanceID, in.Node, in.Status.Phase)
				}
				want = append(want, in.InstanceID)
			}
		}
		slices.Sort(want)
		got, err := runningInstances(t.Context(), node2)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) || len(want) != 4 {
			return fmt.Errorf("node2 runs %v, the cluster assigns it %v", got, want)
		}
		solo = time.Since(back)
		return nil
	})
	t.Logf("link up -> solo running on node2 for the cluster: %s", solo.Round(time.Millisecond))
	sameKept("rejoined")
	sameSolo("rejoined")
	sameSecretive("rejoined")
	sameBuilt("rejoined")
	polltest.UntilErr(t, time.Minute, "the cluster's Job run succeeds with the instance node2 ran while detached", func() error {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "jobs", "batch", "-o", "json")
		if err != nil {
			return err
		}
		var runs []api.JobRun
		if err := json.Unmarshal([]byte(out), &runs); err != nil {
			return fmt.Errorf("decode katcall get jobs: %w\n%s", err, out)
		}
		if len(runs) != 1 || runs[0].State != api.RunSucceeded || len(runs[0].Instances) != 1 || runs[0].Instances[0].Node != "node2" {
			return fmt.Errorf("runs of batch: %+v", runs)
		}
		return nil
	})
	if at, err := started(t.Context(), node2, batchID); err != nil || at != batchStart {
		t.Fatalf("batch's container %s started %s (%v), want once, at %s", batchID, at, err, batchStart)
	}
}

// sameContainer waits for workload's one running container on h and
// returns a check that it is still that container, never restarted
// (0 restarts): the same and only running container of workload, with the
// same start time.
func sameContainer(t *testing.T, h harness.Host, workload string) func(when string) {
	t.Helper()
	id := containerOf(t, h, workload)
	start, err := started(t.Context(), h, id)
	if err != nil {
		t.Fatal(err)
	}
	return func(when string) {
		t.Helper()
		ids, err := h.Containers(t.Context(), "label=kat.workload="+workload, "status=running")
		if err != nil {
			t.Fatal(err)
		}
		at, err := started(t.Context(), h, id)
		if err != nil || len(ids) != 1 || ids[0] != id || at != start {
			t.Fatalf("%s: %s runs as %v started %s (%v); want only %s, started %s: 0 restarts", when, workload, ids, at, err, id, start)
		}
	}
}
