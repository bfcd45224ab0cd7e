package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestLogsFollowAcrossRotation: with cluster.kat's containerLogMaxSize at
// its minimum (64Ki), an instance that writes about four times that keeps
// at most 64Ki of log on the node, its newest lines, and a katcall logs -f
// started while it writes follows the log across each rotation to the last
// line.
func TestLogsFollowAcrossRotation(t *testing.T) {
	requirePodman(t)
	base, err := os.ReadFile(filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	clusterKat := filepath.Join(t.TempDir(), "cluster.kat")
	if err := os.WriteFile(clusterKat, append(base, "  containerLogMaxSize: 64Ki\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClusterFrom(t, clusterKat)
	name := "chatty-" + randomHex(3)
	ref := "default/" + name
	// 4000 lines of 64 bytes (250 KiB) in batches of 100 a tenth of a
	// second apart, after a pause for the follower to attach.
	mustApply(t, c, writeWorkload(t, map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: %s, namespace: default}
spec:
  type: Service
  replicas: 1
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Never}
  container:
    command: ["/bin/sh", "-c"]
    args: ["sleep 3; i=0; while [ $i -lt 4000 ]; do printf 'line %%04d of a log that rotates every sixty-four KiB.........\n' $i; i=$((i+1)); [ $((i %% 100)) -eq 0 ] && sleep 0.1; done; echo done; exec sleep 600"]
`, name)}))
	d := waitStatus(t, c, ref, "the instance running", func(d *api.WorkloadDetail) bool {
		return len(d.Instances) == 1 && d.Instances[0].Status.State == "running"
	})
	// One instance's log, unprefixed: the bytes the node kept.
	instance := d.Instances[0].InstanceID

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	follow := exec.CommandContext(ctx, c.Bin.Katcall, "--config", c.KatcallConfig(), "logs", ref, "--instance", instance, "-f")
	follow.Env = append(os.Environ(), "KATCONFIG=", "HOME="+os.TempDir())
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	follow.Stderr = &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	lines, last := 0, ""
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "done" {
		lines, last = lines+1, sc.Text()
	}
	if sc.Text() != "done" {
		t.Fatalf("katcall logs -f ended after %d lines, the last %q, before the last line (%v): %s", lines, last, sc.Err(), stderr.String())
	}
	if !strings.HasPrefix(last, "line 3999 ") || lines < 2000 {
		t.Errorf("katcall logs -f read %d lines up to %q; want at least half of the 4000 and line 3999 last", lines, last)
	}

	r := c.Katcall(context.Background(), "logs", ref, "--instance", instance)
	if r.Code != 0 {
		t.Fatalf("katcall logs: %s", r)
	}
	if n := len(r.Stdout); n > 64<<10 || !strings.HasSuffix(r.Stdout, "done\n") || strings.Contains(r.Stdout, "line 0000 ") {
		t.Fatalf("the node kept %d bytes of log (at most 64Ki wanted, the newest lines only), starting %q", n, r.Stdout[:min(n, 80)])
	}
}
