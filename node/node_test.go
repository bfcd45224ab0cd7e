package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/internal/freeport"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
)

// freePorts returns n TCP ports free on this machine at the time of the
// call (freeport.TCP).
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := freeport.TCP(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// testOptions are init options for a node in dir on free ports, with podman
// replaced by a binary that does not exist (the agent then reports
// RuntimeReady=False and the leader works on).
func testOptions(t *testing.T, dir string) Options {
	t.Helper()
	p := freePorts(t, 4)
	agent := DefaultAgentOptions()
	agent.Podman = filepath.Join(dir, "no-podman")
	agent.BuildDir = filepath.Join(t.TempDir(), "builds")
	return Options{
		ConfigPath: testClusterKat(t, dir), DataDir: filepath.Join(dir, "data"),
		NodeName: "n1", AdvertiseAddress: "127.0.0.1",
		APIPort: p[0], AgentPort: p[1], EtcdClientPort: p[2], EtcdPeerPort: p[3], Agent: agent,
		// The tests' nodes share the machine's network namespace: no
		// WireGuard device (scripts/multinode tests the overlay).
		Overlay: OverlayOptions{Mode: "off"},
	}
}

// testClusterKat writes testdata/cluster.kat with its backupPath in dir
// (the leader snapshots etcd there, not into the machine's
// /var/lib/kat/backups) and returns its path.
func testClusterKat(t *testing.T, dir string) string {
	t.Helper()
	b := readFile(t, filepath.Join("testdata", "cluster.kat"))
	path := filepath.Join(dir, "test-cluster.kat")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fmt.Appendf(b, "  backupPath: %s\n", filepath.Join(dir, "backups")), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// reopen closes n and opens its data directory again without cluster.kat
// (a resume); the node is closed when the test ends.
func reopen(t *testing.T, n *Node, o Options) *Node {
	t.Helper()
	n.Close()
	o.ConfigPath = ""
	n, err := Open(t.Context(), o, zerolog.Nop())
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(n.Close)
	return n
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenCreatesThenResumes: the first Open creates the cluster (CA, node
// certificate, tokens, node state, cluster records); a later Open of the
// same directory without cluster.kat resumes it with the same identity.
func TestOpenCreatesThenResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := testOptions(t, dir)
	ctx := t.Context()
	n, err := Open(ctx, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	info, err := n.Repo().ClusterInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := dataDir(o.DataDir)
	ca, admin, join := readFile(t, filepath.Join(d.pkiDir(), "ca.crt")), readFile(t, d.adminToken()), readFile(t, d.joinToken())
	for _, f := range []string{d.stateFile(), filepath.Join(d.pkiDir(), "node.crt"), filepath.Join(d.pkiDir(), "node.key")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("first init did not create %s: %v", f, err)
		}
	}
	n = reopen(t, n, o)
	again, err := n.Repo().ClusterInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.UID != info.UID {
		t.Errorf("resumed cluster UID %s, want %s", again.UID, info.UID)
	}
	if !bytes.Equal(readFile(t, filepath.Join(d.pkiDir(), "ca.crt")), ca) || !bytes.Equal(readFile(t, d.adminToken()), admin) ||
		!bytes.Equal(readFile(t, d.joinToken()), join) {
		t.Error("resume changed the CA or a token")
	}
}

// TestOpenRefusesBadInput: a missing or invalid cluster.kat and bad options
// are refused with an error naming the flag or the file, line and field, and
// the data directory is not created.
func TestOpenRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.kat")
	if err := os.WriteFile(bad, []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: ClusterConfiguration\n"+
		"metadata: {name: x}\nspec:\n  clusterCIDR: 10.0.0.0/33\n  serviceCIDR: 10.1.0.0/16\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		edit  func(o *Options)
		wants []string
	}{
		{"no cluster.kat", func(o *Options) { o.ConfigPath = "" }, []string{"--config: required"}},
		{"missing cluster.kat", func(o *Options) { o.ConfigPath = filepath.Join(dir, "nope.kat") }, []string{"--config", "nope.kat"}},
		{"invalid cluster.kat", func(o *Options) { o.ConfigPath = bad }, []string{"bad.kat:5: spec.clusterCIDR"}},
		{"bad options", func(o *Options) {
			o.APIPort, o.AdvertiseAddress, o.NodeName, o.Agent.KeepImages = 70000, "nope", "Bad_Name", 0
		}, []string{"--api-port: 70000", `--advertise-address: "nope"`, `--node-name: "Bad_Name"`, "--keep-images: 0"}},
		{"external etcd without scheme", func(o *Options) { o.EtcdEndpoints = []string{"10.0.0.1:2379"} },
			[]string{`--etcd-endpoints: "10.0.0.1:2379"`}},
		{"app repo key without known hosts", func(o *Options) { o.Agent.AppAuth.SSHKeyFile = "/etc/kat/id" },
			[]string{"--app-repo-ssh-key-file needs --app-repo-known-hosts-file"}},
		{"bad podman network name", func(o *Options) { o.Agent.PodmanNetwork = "-kat" },
			[]string{`--podman-network: "-kat" is not a valid network name`}},
		{"profiles served beyond loopback", func(o *Options) { o.PprofAddress = "0.0.0.0:6060" },
			[]string{`--pprof-address: "0.0.0.0:6060" must be a loopback address`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t, filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")))
			tc.edit(&o)
			n, err := Open(t.Context(), o, zerolog.Nop())
			if err == nil {
				n.Close()
				t.Fatal("Open accepted bad input")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, err := os.Stat(o.DataDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("refused Open left %s behind (%v)", o.DataDir, err)
			}
		})
	}
}

// TestRunLeadsAndLogsCleanJSON runs a node: it is elected, serves the API
// with its certificate and writes katcall.yaml; when ctx ends Run returns
// and the leadership is given up. Every log line it wrote is one JSON
// object without a repeated key (log pipelines reject or mangle those).
func TestRunLeadsAndLogsCleanJSON(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := testOptions(t, dir)
	var logs testenv.SyncBuffer
	n, err := Open(t.Context(), o, NewLogger("debug", "json", &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // only /healthz of a test server
	polltest.UntilErr(t, leaderStartTimeout, "the leader serves the API", func() error {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", o.APIPort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		_, err = os.Stat(n.KatcallConfigPath())
		return err
	})
	leader, err := n.st.GetLeader(t.Context())
	if err != nil || leader != "n1" {
		t.Fatalf("leader %q (%v), want n1", leader, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if id, err := n.st.GetLeader(context.Background()); err == nil {
		t.Errorf("leader %q still recorded after Run returned", id)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 5 {
		t.Fatalf("only %d log lines:\n%s", len(lines), logs.String())
	}
	for _, line := range lines {
		if err := testenv.CheckJSONLine(line); err != nil {
			t.Errorf("log line %s: %v", line, err)
		}
	}
}
