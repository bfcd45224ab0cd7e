package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

// TestMissingClusterFiles: each file of spec.gitops this machine cannot
// read is named with its field; present ones and unset ones are not.
func TestMissingClusterFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	present := filepath.Join(dir, "secret")
	must(t, os.WriteFile(present, []byte("s\n"), 0o600))
	if got := missingClusterFiles(quadlet.ClusterSpec{}); got != nil {
		t.Errorf("without gitops: %v", got)
	}
	got := missingClusterFiles(quadlet.ClusterSpec{GitOps: &quadlet.GitOpsConfig{
		Repository: "file:///srv/config.git", WebhookSecretFile: present,
		SSHKeyFile: filepath.Join(dir, "id_ed25519"), KnownHostsFile: filepath.Join(dir, "known_hosts"),
	}})
	if len(got) != 2 || !strings.HasPrefix(got[0], "spec.gitops.sshKeyFile "+filepath.Join(dir, "id_ed25519")+": ") ||
		!strings.HasPrefix(got[1], "spec.gitops.knownHostsFile ") || !strings.Contains(got[1], "no such file") {
		t.Errorf("missing files: %q, want sshKeyFile's and knownHostsFile's", got)
	}
}
