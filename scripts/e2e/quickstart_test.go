package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/freeport"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestQuickStartScripts runs the README's start command (scripts/up.sh, which
// task up calls) on free ports, twice to prove it resumes, then stops it with
// scripts/down.sh. In between it follows the README's Git tour: clone the
// config repo, commit a new workload, push, katcall sync, and the workload
// appears.
func TestQuickStartScripts(t *testing.T) {
	t.Parallel()
	ports, err := freeport.TCP(4)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	configRepo := filepath.Join(t.TempDir(), "config.git")
	node := "e2e-qs-" + randomHex(3)
	env := append(os.Environ(), "KAT_DATA_DIR="+data, "KAT_CONFIG_REPO="+configRepo, "KAT_NODE_NAME="+node,
		"KAT_API_PORT="+itoa(ports[0]), "KAT_AGENT_PORT="+itoa(ports[1]),
		"KAT_ETCD_CLIENT_PORT="+itoa(ports[2]), "KAT_ETCD_PEER_PORT="+itoa(ports[3]),
		// Not an ingress node: the proxy would publish the machine's own
		// port 80 beside other tests (scripts/multinode's TestIngress runs
		// the recipe on its hosts).
		"KAT_NODE_LABELS=")
	// up.sh builds both binaries first, with -trimpath as TestMain's Build
	// does, so it links the packages compiled there; a cold build cache on
	// a busy 2-core machine still takes minutes: the bound is for a hang,
	// not for slowness.
	script := func(name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(RepoRoot(), "scripts", name)}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		// A container of another cluster with the same node name (a node
		// initialised again) must survive down.sh --containers.
		foreign := node + "-other-cluster"
		_, podmanErr := exec.LookPath("podman")
		if podmanErr == nil {
			if out, err := exec.Command("podman", "create", "--name", foreign, "--label", "kat.managed=true",
				"--label", "kat.node="+node, "--label", "kat.cluster=another-cluster", "localhost/kat-base:latest", "true").CombinedOutput(); err != nil {
				t.Errorf("podman create %s: %v\n%s", foreign, err, out)
			}
		}
		if out, err := script("down.sh", "--containers"); err != nil {
			t.Errorf("down.sh --containers: %v\n%s", err, out)
		}
		if podmanErr == nil {
			left, err := exec.Command("podman", "ps", "-a", "--format", "{{.Names}}", "--filter", "label=kat.node="+node).Output()
			if err != nil || strings.TrimSpace(string(left)) != foreign {
				t.Errorf("down.sh --containers should remove the containers of node %s of its cluster, and only those; left: %q (%v)", node, left, err)
			}
		}
		if err := RemoveNodeContainers(node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	out, err := script("up.sh")
	if err != nil {
		t.Fatalf("up.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"kat-agent started", "created the config repo", "of branch main applied",
		"Leader:     ", "Nodes:      1/1 ready", "Workloads:  4", "git:config/default/hello"} {
		if !strings.Contains(out, want) {
			t.Errorf("up.sh output lacks %q:\n%s", want, out)
		}
	}
	gitPushNewWorkload(t, configRepo)
	katcall := func(args ...string) Result {
		return RunKatcall(context.Background(), filepath.Join(RepoRoot(), "bin", "katcall"),
			append([]string{"--config", filepath.Join(data, "katcall.yaml")}, args...)...)
	}
	if r := katcall("sync"); r.Code != 0 {
		t.Fatalf("katcall sync: %s", r)
	}
	polltest.UntilErr(t, 60*time.Second, "the pushed workload appears", func() error {
		r := katcall("get", "workloads")
		if r.Code == 0 && strings.Contains(r.Stdout, "pushed") && strings.Contains(r.Stdout, "git:config/default/pushed") {
			return nil
		}
		return fmt.Errorf("%s\n%s", r, katcall("get", "sources"))
	})
	out, err = script("up.sh")
	if err != nil || !strings.Contains(out, "already running") || !strings.Contains(out, "Workloads:  5") {
		t.Fatalf("second up.sh: %v\n%s", err, out)
	}
	out, err = script("down.sh")
	if err != nil || !strings.Contains(out, "kat-agent stopped") {
		t.Fatalf("down.sh: %v\n%s", err, out)
	}
	out, err = script("up.sh")
	if err != nil || !strings.Contains(out, "kat-agent started") || !strings.Contains(out, "Workloads:  5") ||
		strings.Contains(out, "created the config repo") {
		t.Fatalf("up.sh after down.sh should resume the same cluster and config repo: %v\n%s", err, out)
	}
}

// gitPushNewWorkload clones the config repo, adds default/pushed and pushes,
// as the README tells a user to.
func gitPushNewWorkload(t *testing.T, repo string) {
	t.Helper()
	work := filepath.Join(t.TempDir(), "my-config")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com",
			"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git(filepath.Dir(work), "clone", "-q", repo, work)
	hello, err := os.ReadFile(filepath.Join(work, "default", "hello", "workload.kat"))
	if err != nil {
		t.Fatal(err)
	}
	pushed := strings.Replace(string(hello), "name: hello", "name: pushed", 1)
	if err := os.MkdirAll(filepath.Join(work, "default", "pushed"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "default", "pushed", "workload.kat"), []byte(pushed), 0o644); err != nil {
		t.Fatal(err)
	}
	git(work, "add", "-A")
	git(work, "commit", "-q", "-m", "add default/pushed")
	git(work, "push", "-q", "origin", "main")
}
