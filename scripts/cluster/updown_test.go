package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
)

// TestUpAndDown runs the command as task cluster:up -- 2 and task
// cluster:down do: up leaves two Ready nodes that katcall reaches with the
// configuration it prints; a workload's containers run on the hosts; down
// removes the agents, the containers and every host.
func TestUpAndDown(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "a cluster of network namespaces needs root")
	}
	for _, tool := range []string{"ip", "nsenter", "iptables", "podman", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(t, "%s is not installed (scripts/install-prereqs.sh)", tool)
		}
	}
	bin := t.TempDir()
	b, err := e2e.Build(bin)
	if err != nil {
		t.Fatal(err)
	}
	// Podman refuses a run root of more than 50 characters.
	short, err := os.MkdirTemp("", "kcl") //nolint:usetesting // see above
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(short, "c")
	t.Cleanup(func() {
		var out strings.Builder
		if err := run(context.Background(), []string{"down"}, &out); err != nil {
			// Keep the state directory: task cluster:down can retry.
			t.Errorf("down at the end: %v\n%s\n(KAT_CLUSTER_DIR=%s)", err, out.String(), stateDir)
			return
		}
		os.RemoveAll(short)
	})
	t.Setenv("KAT_CLUSTER_DIR", stateDir)
	t.Setenv("KAT_CLUSTER_NAME", fmt.Sprintf("kc%d", os.Getpid()))
	t.Setenv("KAT_BIN", bin)
	t.Setenv("KAT_BASE_IMAGE_SCRIPT", filepath.Join(e2e.RepoRoot(), "scripts", "build-base-image.sh"))

	var out strings.Builder
	if err := run(t.Context(), []string{"up", "--", "2"}, &out); err != nil {
		t.Fatalf("up: %v\n%s", err, out.String())
	}
	c, err := harness.Load(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "export KATCONFIG="+c.KatcallConfig()) {
		t.Errorf("up does not say how to use katcall:\n%s", out.String())
	}
	nodes := e2e.RunKatcall(t.Context(), b.Katcall, "--config", c.KatcallConfig(), "get", "nodes")
	if nodes.Code != 0 || strings.Count(nodes.Stdout, "Ready") != 2 {
		t.Fatalf("katcall get nodes after up: %v", nodes)
	}

	wl := filepath.Join(t.TempDir(), "two")
	if err := os.MkdirAll(wl, 0o755); err != nil {
		t.Fatal(err)
	}
	kat := `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: two, namespace: default}
spec:
  type: Service
  replicas: 2
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["sleep", "100000"]}
`
	if err := os.WriteFile(filepath.Join(wl, "workload.kat"), []byte(kat), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := e2e.RunKatcall(t.Context(), b.Katcall, "--config", c.KatcallConfig(), "apply", "-f", wl); r.Code != 0 {
		t.Fatalf("katcall apply: %v", r)
	}
	polltest.UntilErr(t, 2*time.Minute, "2 containers of the workload running", func() error {
		n := 0
		for _, h := range c.Hosts {
			ids, err := h.Containers(t.Context(), "label=kat.workload=two", "status=running")
			if err != nil {
				return err
			}
			n += len(ids)
		}
		if n != 2 {
			return fmt.Errorf("%d running", n)
		}
		return nil
	})

	// The containers' processes, which run in namespaces of their own.
	var pids []string
	for _, h := range c.Hosts {
		ids, err := h.Containers(t.Context(), "label=kat.workload=two")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			args := append(h.PodmanArgs(), "inspect", "--format", "{{.State.Pid}}", id)
			pid, err := h.Command(t.Context(), "podman", args...).Output()
			if err != nil {
				t.Fatalf("podman inspect %s: %v", id, err)
			}
			pids = append(pids, strings.TrimSpace(string(pid)))
		}
	}

	out.Reset()
	if err := run(t.Context(), []string{"down"}, &out); err != nil {
		t.Fatalf("down: %v\n%s", err, out.String())
	}
	for _, h := range c.Hosts {
		if _, err := os.Stat(h.NetnsPath()); err == nil {
			t.Errorf("%s is still there after down", h.NetnsPath())
		}
		if _, err := os.Stat(h.Dir); err == nil {
			t.Errorf("%s is still there after down", h.Dir)
		}
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + pid); err == nil {
			t.Errorf("the container process %s still runs after down", pid)
		}
	}
	if ps, _ := exec.Command("pgrep", "-f", stateDir).Output(); len(ps) > 0 {
		t.Errorf("processes naming %s still run after down (agents, conmon): %s", stateDir, ps)
	}
}
