package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentRefusesBadInput: kat-agent init with a bad flag or cluster.kat
// exits non-zero, names what is wrong, and creates nothing.
func TestAgentRefusesBadInput(t *testing.T) {
	t.Parallel()
	bin := sharedBinaries(t)
	dir := t.TempDir()
	badCluster := filepath.Join(dir, "bad-cluster.kat")
	if err := os.WriteFile(badCluster, []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: ClusterConfiguration\n"+
		"metadata: {name: x}\nspec:\n  clusterCIDR: 10.0.0.0/33\n  serviceCIDR: 10.1.0.0/16\n  apiPort: on\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "no cluster.kat on first init", want: []string{"--config: required"}},
		{name: "missing cluster.kat", args: []string{"--config", filepath.Join(dir, "nope.kat")}, want: []string{"--config", "nope.kat"}},
		{name: "invalid cluster.kat", args: []string{"--config", badCluster},
			want: []string{"bad-cluster.kat:5: spec.clusterCIDR", "bad-cluster.kat:7: spec.apiPort"}},
		{name: "bad flags", args: []string{"--config", good, "--api-port", "70000", "--advertise-address", "nope", "--node-name", "Bad_Name"},
			want: []string{"--api-port: 70000", "--advertise-address: \"nope\"", "--node-name: \"Bad_Name\""}},
		{name: "external etcd URL without scheme", args: []string{"--config", good, "--etcd-endpoints", "10.0.0.1:2379"},
			want: []string{"--etcd-endpoints: \"10.0.0.1:2379\""}},
		{name: "bad build flags", args: []string{"--config", good, "--keep-images", "0"}, want: []string{"--keep-images: 0"}},
		{name: "app repo key without known hosts", args: []string{"--config", good, "--app-repo-ssh-key-file", "/etc/kat/id"},
			want: []string{"--app-repo-ssh-key-file needs --app-repo-known-hosts-file"}},
		{name: "bad overlay flags", args: []string{"--config", good, "--wg-interface", "kat-overlay-0001", "--wg-port", "70000", "--wg-mode", "fast"},
			want: []string{"--wg-interface: \"kat-overlay-0001\" is 16 bytes", "--wg-port: 70000 is not a port", "--wg-mode: \"fast\" is not one of auto, kernel, userspace, off"}},
		{name: "bad build timeout", args: []string{"--config", good, "--build-timeout", "1ms"}, want: []string{"--build-timeout: 1ms"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin.Agent, append([]string{"init", "--data-dir", data}, tc.args...)...).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output does not name %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("refused init left %s behind (%v)", data, err)
			}
		})
	}
}
