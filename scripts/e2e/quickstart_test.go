package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestQuickStartScripts runs the README's start command (scripts/up.sh, which
// task up calls) on free ports, twice to prove it resumes, then stops it with
// scripts/down.sh.
func TestQuickStartScripts(t *testing.T) {
	ports, err := FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	node := "e2e-qs-" + randomHex(3)
	env := append(os.Environ(), "KAT_DATA_DIR="+data, "KAT_NODE_NAME="+node,
		"KAT_API_PORT="+itoa(ports[0]), "KAT_AGENT_PORT="+itoa(ports[1]),
		"KAT_ETCD_CLIENT_PORT="+itoa(ports[2]), "KAT_ETCD_PEER_PORT="+itoa(ports[3]))
	script := func(name string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(RepoRoot(), "scripts", name))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if out, err := script("down.sh"); err != nil {
			t.Errorf("down.sh: %v\n%s", err, out)
		}
		if err := RemoveNodeContainers(node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	out, err := script("up.sh")
	if err != nil {
		t.Fatalf("up.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"kat-agent started", "workload default/hello created (generation 1)",
		"Leader:     ", "Nodes:      1/1 ready", "Workloads:  3"} {
		if !strings.Contains(out, want) {
			t.Errorf("up.sh output lacks %q:\n%s", want, out)
		}
	}
	out, err = script("up.sh")
	if err != nil || !strings.Contains(out, "already running") || !strings.Contains(out, "unchanged (generation 1)") {
		t.Fatalf("second up.sh: %v\n%s", err, out)
	}
	out, err = script("down.sh")
	if err != nil || !strings.Contains(out, "kat-agent stopped") {
		t.Fatalf("down.sh: %v\n%s", err, out)
	}
	out, err = script("up.sh")
	if err != nil || !strings.Contains(out, "kat-agent started") || !strings.Contains(out, "unchanged (generation 1)") {
		t.Fatalf("up.sh after down.sh should resume the same cluster: %v\n%s", err, out)
	}
}
