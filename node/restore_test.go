package node

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// clusterState renders what a restore must keep: desired state,
// namespaces, sources and the token hashes.
func clusterState(t *testing.T, n *Node) string {
	t.Helper()
	var b strings.Builder
	for _, prefix := range []string{"/kat/workloads/desired/", "/kat/namespaces/", "/kat/sources/", "/kat/config/cluster"} {
		kvs, err := n.st.List(t.Context(), prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			b.WriteString(kv.Key + "=" + string(kv.Value) + "\n")
		}
	}
	return b.String()
}

// TestRestoreRoundTrip: a snapshot of a running cluster, restored into a
// new data directory, opens as the same cluster with the same desired
// state, namespaces and sources, with the old CA and tokens when
// --from-data-dir is given and with new ones (that work, while the old do
// not) when it is not.
func TestRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	o := testOptions(t, dir)
	n, err := Open(ctx, o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.repo.EnsureNamespace(ctx, "default", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.repo.EnsureNamespace(ctx, "shop", map[string]string{"team": "web"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.repo.PutSourceSpec(ctx, api.SourceSpec{Name: "ops", URL: "https://git.example.com/ops.git", Branch: "main", Path: ".", IntervalSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"shop/web/meta", "shop/web/manifest/workload.kat", "default/db/meta"} {
		if err := n.st.Put(ctx, "/kat/workloads/desired/"+k, []byte("value of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	// A secret sealed with the CA key, and the recipient Git files are
	// encrypted to: with the old data directory both survive.
	sealed := &quadlet.Secret{Metadata: quadlet.ObjectMeta{Namespace: "default", Name: "db"},
		Values: map[string]quadlet.SecretValue{"password": quadlet.NewSecretValue([]byte("restore-SENTINEL"))}}
	if _, _, err := n.repo.ApplySecret(ctx, resources.SecretApply{Secret: sealed, Owner: api.APIOwner()}, n.ca); err != nil {
		t.Fatal(err)
	}
	oldRecipient, err := n.ca.AgeRecipient()
	if err != nil {
		t.Fatal(err)
	}
	want := clusterState(t, n)
	info, err := n.repo.ClusterInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := filepath.Join(dir, "snap.db")
	if _, err := n.etcd.SaveSnapshot(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	n.Close()
	oldDir := dataDir(o.DataDir)
	oldAdmin := strings.TrimSpace(string(readFile(t, oldDir.adminToken())))

	tests := []struct {
		name string
		from string
		node string
	}{
		{"with the old data directory", o.DataDir, ""},
		{"without it", "", "n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ro := testOptions(t, t.TempDir())
			ro.ConfigPath = "" // the snapshot holds the cluster's configuration
			if tc.node != "" {
				ro.NodeName = tc.node
			}
			opts := RestoreOptions{
				SnapshotPath: snapshot, DataDir: ro.DataDir, FromDataDir: tc.from,
				NodeName: ro.NodeName, AdvertiseAddress: ro.AdvertiseAddress, EtcdPeerPort: ro.EtcdPeerPort,
			}
			if tc.from == "" {
				// The snapshot holds a secret a new CA cannot open.
				_, err := Restore(opts, zerolog.Nop())
				if err == nil || !strings.Contains(err.Error(), "holds 1 secrets sealed with the cluster's CA key: restore with --from-data-dir") ||
					!strings.Contains(err.Error(), "--discard-secrets") {
					t.Fatalf("restore without the CA of a snapshot with secrets: %v", err)
				}
				opts.DiscardSecrets = true
			}
			res, err := Restore(opts, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			if res.ClusterUID != info.UID || res.NodeName != ro.NodeName || res.KeptCredentials != (tc.from != "") {
				t.Errorf("result = %+v", res)
			}
			r, err := Open(ctx, ro, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if got := clusterState(t, r); got != want {
				t.Errorf("restored state:\n%s\nwant:\n%s", got, want)
			}
			d := dataDir(ro.DataDir)
			admin := strings.TrimSpace(string(readFile(t, d.adminToken())))
			hash, err := r.repo.AdminTokenHash(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !resources.TokenMatches(hash, admin) {
				t.Error("the restored admin token does not match the cluster's hash")
			}
			keptCA := bytes.Equal(readFile(t, filepath.Join(d.pkiDir(), "ca.crt")), readFile(t, filepath.Join(oldDir.pkiDir(), "ca.crt")))
			if kept := tc.from != ""; keptCA != kept || (admin == oldAdmin) != kept || resources.TokenMatches(hash, oldAdmin) != kept {
				t.Errorf("kept the CA: %v, the admin token: %v, old token valid: %v; want all %v", keptCA, admin == oldAdmin, resources.TokenMatches(hash, oldAdmin), kept)
			}
			_, values, err := r.repo.OpenSecret(ctx, "default", "db", r.ca)
			recipient, rerr := r.ca.AgeRecipient()
			if tc.from != "" && (err != nil || string(values["password"].Reveal()) != "restore-SENTINEL" || rerr != nil || recipient != oldRecipient) {
				t.Errorf("with the old CA the secret opens (%v) and the recipient stays (%s, want %s)", err, recipient, oldRecipient)
			}
			if tc.from == "" && (!errors.Is(err, resources.ErrNotFound) || recipient == oldRecipient) {
				t.Errorf("with a new CA the secrets are discarded (%v) and the recipient changes", err)
			}
			st, err := loadNodeState(d)
			if err != nil || st.ResetTokens || st.ClusterUID != info.UID {
				t.Errorf("node state after the first start = %+v, %v", st, err)
			}
		})
	}
}

// TestRestoreRefusals: bad flags, a missing or damaged snapshot, a used
// data directory and a wrong old data directory are refused with an error
// naming the flag, and leave no data directory behind.
func TestRestoreRefusals(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	corrupt := filepath.Join(tmp, "corrupt.db")
	if err := os.WriteFile(corrupt, bytes.Repeat([]byte("x"), 512+32), 0o600); err != nil {
		t.Fatal(err)
	}
	used := filepath.Join(tmp, "used")
	if err := os.MkdirAll(used, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "node.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A real snapshot of a KAT cluster, and one of an etcd without KAT.
	good := filepath.Join(tmp, "good.db")
	plain := filepath.Join(tmp, "plain.db")
	{
		ctx := t.Context()
		n, err := Open(ctx, testOptions(t, filepath.Join(tmp, "old")), zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.etcd.SaveSnapshot(ctx, good); err != nil {
			t.Fatal(err)
		}
		if err := n.etcd.Delete(ctx, "/kat/config/cluster"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.etcd.SaveSnapshot(ctx, plain); err != nil {
			t.Fatal(err)
		}
		n.Close()
	}
	emptyOld := filepath.Join(tmp, "empty-old")
	if err := os.MkdirAll(emptyOld, 0o700); err != nil {
		t.Fatal(err)
	}
	fresh := func() string { return filepath.Join(t.TempDir(), "new") }
	tests := []struct {
		name string
		o    RestoreOptions
		want string
	}{
		{"no snapshot flag", RestoreOptions{DataDir: fresh()}, "--snapshot: required"},
		{"no data dir flag", RestoreOptions{SnapshotPath: good}, "--data-dir: required"},
		{"missing snapshot", RestoreOptions{SnapshotPath: filepath.Join(tmp, "nope.db"), DataDir: fresh()}, "--snapshot " + filepath.Join(tmp, "nope.db") + ": verify snapshot: open"},
		{"corrupt snapshot", RestoreOptions{SnapshotPath: corrupt, DataDir: fresh()}, "--snapshot " + corrupt + ": store: corrupt snapshot"},
		{"snapshot is a directory", RestoreOptions{SnapshotPath: tmp, DataDir: fresh()}, "is not a regular file"},
		{"snapshot without a cluster", RestoreOptions{SnapshotPath: plain, DataDir: fresh()}, "no KAT cluster in the snapshot"},
		{"data dir not empty", RestoreOptions{SnapshotPath: good, DataDir: used}, "--data-dir: " + used + " exists and is not empty"},
		{"old dir is no data dir", RestoreOptions{SnapshotPath: good, DataDir: fresh(), FromDataDir: emptyOld}, "--from-data-dir: " + emptyOld + " has no node.json"},
		{"old dir is the new one", RestoreOptions{SnapshotPath: good, DataDir: used, FromDataDir: used + "/"}, "--from-data-dir: must differ from --data-dir"},
		{"bad address", RestoreOptions{SnapshotPath: good, DataDir: fresh(), AdvertiseAddress: "0.0.0.0"}, "--advertise-address"},
		{"bad node name", RestoreOptions{SnapshotPath: good, DataDir: fresh(), NodeName: "Bad_Name"}, "--node-name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Restore(tc.o, zerolog.Nop())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			if tc.o.DataDir != "" && tc.o.DataDir != used {
				if _, err := os.Stat(tc.o.DataDir); !os.IsNotExist(err) {
					t.Errorf("refused restore left %s: %v", tc.o.DataDir, err)
				}
			}
		})
	}
	if entries, _ := os.ReadDir(used); len(entries) != 1 {
		t.Errorf("a refused restore changed %s: %d entries", used, len(entries))
	}
}
