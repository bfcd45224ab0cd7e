package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestCheckPrereqsScript: scripts/check-prereqs.sh (run by every `task
// prereqs`, so by `task up` and `task ci`) passes on a prepared machine and,
// on one that lacks a program netavark runs, names it with its package and
// fails.
func TestCheckPrereqsScript(t *testing.T) {
	t.Parallel()
	requirePodman(t)
	script := filepath.Join(RepoRoot(), "scripts", "check-prereqs.sh")
	if out, err := exec.Command("bash", script).CombinedOutput(); err != nil {
		skipOrFail(t, "this machine lacks a prerequisite (run scripts/install-prereqs.sh): %v\n%s", err, out)
	}
	ipt, err := exec.LookPath("iptables")
	if err != nil || !strings.HasPrefix(ipt, "/usr/sbin/") {
		t.Skipf("iptables is at %q, not only in /usr/sbin: cannot hide it with PATH", ipt)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("check-prereqs.sh without /usr/sbin in PATH: %v, want exit 1\n%s", err, out)
	}
	for _, w := range []string{"iptables is not in PATH", "apt-get install iptables"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output does not say %q:\n%s", w, out)
		}
	}
}

// TestAgentNamesAMissingPrerequisite: a kat-agent whose PATH lacks iptables
// (as on a fresh machine where Podman was installed without it) reports
// RuntimeReady=False on its node and on the instance it cannot start, both
// naming iptables and how to install it, instead of netavark's bare "No such
// file or directory".
func TestAgentNamesAMissingPrerequisite(t *testing.T) {
	t.Parallel()
	requirePodman(t)
	if ipt, err := exec.LookPath("iptables"); err != nil || !strings.HasPrefix(ipt, "/usr/sbin/") {
		t.Skipf("iptables is at %q, not only in /usr/sbin: cannot hide it with PATH", ipt)
	}
	c, err := NewCluster(sharedBinaries(t), t.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	c.Env = []string{"PATH=/usr/bin:/bin"}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Stop(30 * time.Second)
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	polltest.UntilErr(t, time.Minute, "the node reports the missing iptables", func() error {
		r := c.Katcall(context.Background(), "get", "nodes", "-o", "json")
		var nodes []api.Node
		if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil {
			return err
		}
		for _, n := range nodes {
			for _, cond := range n.Conditions {
				if cond.Type == "RuntimeReady" && cond.Status == "False" && strings.Contains(cond.Message, "iptables") &&
					strings.Contains(cond.Message, "apt-get install iptables") {
					return nil
				}
			}
		}
		return fmt.Errorf("nodes: %s", r.Stdout)
	})
	name := "noipt-" + randomHex(3)
	mustApplyTB(t, c, writeWorkload(t, webWorkload(name, 1, containerPort(t))))
	waitStatus(t, c, "default/"+name, "the instance message naming iptables", func(d *api.WorkloadDetail) bool {
		return len(d.Instances) == 1 && strings.Contains(d.Instances[0].Status.Message, "iptables")
	})
}
