package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
)

// TestBackupRestoreRoundTrip: a cluster with workloads, a namespace and a
// Git source takes a snapshot with katcall backup; after it stops, kat-agent
// restore (keeping the old CA and tokens) and kat-agent init on a new data
// directory bring up a cluster whose desired state, namespaces and source
// specs are the same keys and values, answering the old admin token.
// Restored again without the old data directory, the cluster has the same
// records, a new CA and a new admin token, and refuses the old one. restore
// refuses a missing snapshot and a used data directory.
func TestBackupRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := NewCluster(sharedBinaries(t), t.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			if err := c.Stop(30 * time.Second); err != nil {
				t.Errorf("stop kat-agent: %v\n%s", err, c.Tail(20))
			}
		}
		// The restored node has the same name: this removes its
		// containers and network too, after its own cleanup stopped it.
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	mustApply(t, c, filepath.Join(RepoRoot(), "examples-repo"))
	if r := c.Katcall(ctx, "source", "set", "ops", "--repo", "https://git.invalid/ops/cluster.git", "--interval", "1h"); r.Code != 0 {
		t.Fatalf("katcall source set: %s", r)
	}
	before := clusterRecords(ctx, t, c)
	if !strings.Contains(before, "/kat/workloads/desired/") || !strings.Contains(before, "/kat/sources/ops/spec") {
		t.Fatalf("the cluster holds no workloads or source to compare:\n%s", before)
	}

	r := c.Katcall(ctx, "backup")
	if r.Code != 0 {
		t.Fatalf("katcall backup: %s", r)
	}
	snapshot := strings.TrimSpace(r.Stdout)
	if filepath.Dir(snapshot) != c.BackupDir() || !strings.HasSuffix(snapshot, ".db") {
		t.Fatalf("katcall backup printed %q, want a .db file in %s", snapshot, c.BackupDir())
	}
	if _, err := store.VerifySnapshot(snapshot); err != nil {
		t.Fatal(err)
	}
	if r := c.Katcall(ctx, "status"); r.Code != 0 || !strings.Contains(r.Stdout, snapshot) {
		t.Errorf("katcall status does not show the backup %s: %s", snapshot, r)
	}
	if r := c.Katcall(ctx, "get", "audit"); r.Code != 0 || !strings.Contains(r.Stdout, "backup") || !strings.Contains(r.Stdout, "cluster") {
		t.Errorf("the audit log does not show the backup: %s", r)
	}
	stopped = true
	if err := c.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}

	restored, err := NewCluster(c.Bin, filepath.Join(t.TempDir(), "restored"), c.Config)
	if err != nil {
		t.Fatal(err)
	}
	restored.Node = c.Node // the same node, on a new data directory
	restore := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, c.Bin.Agent, append([]string{"restore"}, args...)...).CombinedOutput()
		return string(out), err
	}
	refusals := []struct {
		args []string
		want string
	}{
		{[]string{"--snapshot", snapshot + ".missing", "--data-dir", restored.DataDir}, "--snapshot " + snapshot + ".missing"},
		{[]string{"--snapshot", snapshot, "--data-dir", c.DataDir}, "--data-dir: " + c.DataDir + " exists and is not empty"},
	}
	for _, rf := range refusals {
		if out, err := restore(rf.args...); err == nil || !strings.Contains(out, rf.want) {
			t.Errorf("kat-agent restore %v: %v\n%s\nwant an error with %q", rf.args, err, out, rf.want)
		}
	}
	if _, err := os.Stat(restored.DataDir); !os.IsNotExist(err) {
		t.Fatalf("a refused restore left %s behind", restored.DataDir)
	}
	if out, err := restore("--snapshot", snapshot, "--data-dir", restored.DataDir, "--from-data-dir", c.DataDir,
		"--etcd-peer-port", strconv.Itoa(restored.ports[3])); err != nil {
		t.Fatalf("kat-agent restore: %v\n%s", err, out)
	}
	if err := restored.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restoredStopped := false
	t.Cleanup(func() {
		if !restoredStopped {
			if err := restored.Stop(30 * time.Second); err != nil {
				t.Errorf("stop the restored kat-agent: %v\n%s", err, restored.Tail(20))
			}
		}
	})
	if after := clusterRecords(ctx, t, restored); after != before {
		t.Errorf("restored cluster records:\n%s\nwant:\n%s", after, before)
	}
	if readFile(t, filepath.Join(restored.DataDir, "admin.token")) != readFile(t, filepath.Join(c.DataDir, "admin.token")) {
		t.Error("the restored cluster has another admin token")
	}
	if r := restored.Katcall(ctx, "get", "sources"); r.Code != 0 || !strings.Contains(r.Stdout, "ops") {
		t.Errorf("katcall get sources on the restored cluster: %s", r)
	}

	// Without the old data directory: a new CA and new tokens, the same
	// records, and the old admin token refused.
	restoredStopped = true
	if err := restored.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop the restored kat-agent: %v", err)
	}
	fresh, err := NewCluster(c.Bin, filepath.Join(t.TempDir(), "fresh"), c.Config)
	if err != nil {
		t.Fatal(err)
	}
	fresh.Node = c.Node
	if out, err := restore("--snapshot", snapshot, "--data-dir", fresh.DataDir, "--node-name", fresh.Node,
		"--advertise-address", "127.0.0.1", "--etcd-peer-port", strconv.Itoa(fresh.ports[3])); err != nil || !strings.Contains(out, "new CA") {
		t.Fatalf("kat-agent restore without --from-data-dir: %v\n%s", err, out)
	}
	if err := fresh.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fresh.Stop(30 * time.Second); err != nil {
			t.Errorf("stop the second restored kat-agent: %v\n%s", err, fresh.Tail(20))
		}
	})
	if after := clusterRecords(ctx, t, fresh); after != before {
		t.Errorf("records of the cluster restored without its old data directory:\n%s\nwant:\n%s", after, before)
	}
	if readFile(t, filepath.Join(fresh.DataDir, "pki", "ca.crt")) == readFile(t, filepath.Join(c.DataDir, "pki", "ca.crt")) {
		t.Error("the cluster restored without its old data directory kept the old CA")
	}
	oldToken := strings.TrimSpace(readFile(t, filepath.Join(c.DataDir, "admin.token")))
	newConfig := readFile(t, fresh.KatcallConfig())
	if strings.Contains(newConfig, oldToken) {
		t.Fatal("the new katcall.yaml holds the old admin token")
	}
	var kc map[string]any
	if err := yaml.Unmarshal([]byte(newConfig), &kc); err != nil {
		t.Fatal(err)
	}
	kc["token"] = oldToken
	b, err := yaml.Marshal(kc)
	if err != nil {
		t.Fatal(err)
	}
	withOldToken := filepath.Join(t.TempDir(), "old-token.yaml")
	if err := os.WriteFile(withOldToken, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := RunKatcall(ctx, c.Bin.Katcall, "--config", withOldToken, "get", "sources"); r.Code == 0 || !strings.Contains(r.Stderr, "invalid bearer token") {
		t.Errorf("the old admin token on the cluster restored without it: %s", r)
	}
}

// clusterRecords renders what a restore must keep, read from the cluster's
// etcd with the leader's etcd administrator certificate: the desired state
// of every workload, the namespaces and the Git sources' specs.
func clusterRecords(ctx context.Context, t *testing.T, c *Cluster) string {
	t.Helper()
	roots, err := pki.CertPool([]byte(readFile(t, filepath.Join(c.DataDir, "pki", "ca.crt"))))
	if err != nil {
		t.Fatal(err)
	}
	leaf := &pki.Leaf{
		CertPEM: []byte(readFile(t, filepath.Join(c.DataDir, "pki", "etcd-root.crt"))),
		KeyPEM:  []byte(readFile(t, filepath.Join(c.DataDir, "pki", "etcd-root.key"))),
	}
	cfg, err := pki.ClientTLSConfig(roots, leaf)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MinVersion = tls.VersionTLS12
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{c.EtcdClientURL()}, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var b strings.Builder
	for _, prefix := range []string{"/kat/workloads/desired/", "/kat/namespaces/", "/kat/sources/"} {
		kvs, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			if prefix == "/kat/sources/" && !strings.HasSuffix(kv.Key, "/spec") {
				continue // a source's status is the fetcher's, not desired state
			}
			b.WriteString(kv.Key + "=" + string(kv.Value) + "\n")
		}
	}
	return b.String()
}
