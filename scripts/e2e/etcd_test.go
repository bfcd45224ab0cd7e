package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/freeport"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// TestEmbeddedEtcdRequiresAClusterCertificate checks that the embedded etcd's
// client port is not open to anyone who can reach it: a client needs a
// certificate signed by the cluster CA, and what it may read depends on its
// common name: the leader's root certificate reads everything, a node's
// certificate its own assignments but not the election.
func TestEmbeddedEtcdRequiresAClusterCertificate(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	caPEM := []byte(readFile(t, filepath.Join(c.DataDir, "pki", "ca.crt")))
	roots, err := pki.CertPool(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	leafIn := func(name string) *pki.Leaf {
		return &pki.Leaf{
			CertPEM: []byte(readFile(t, filepath.Join(c.DataDir, "pki", name+".crt"))),
			KeyPEM:  []byte(readFile(t, filepath.Join(c.DataDir, "pki", name+".key"))),
		}
	}
	stranger, err := pki.NewCA("stranger")
	if err != nil {
		t.Fatal(err)
	}
	strangerLeaf, err := stranger.Issue(pki.LeafRequest{CommonName: "stranger"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		leaf   *pki.Leaf
		wantOK bool
		root   bool
	}{
		{name: "root certificate", leaf: leafIn("etcd-root"), wantOK: true, root: true},
		{name: "node certificate", leaf: leafIn("node"), wantOK: true},
		{name: "no client certificate"},
		{name: "certificate of another CA", leaf: strangerLeaf},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pki.ClientTLSConfig(roots, tc.leaf)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MinVersion = tls.VersionTLS12
			st, err := store.Dial(ctx, store.DialConfig{Endpoints: []string{c.EtcdClientURL()}, TLS: cfg, DialTimeout: 3 * time.Second})
			if !tc.wantOK {
				if err == nil {
					st.Close()
					t.Fatal("dial succeeded without a cluster client certificate")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			leader, err := st.GetLeader(ctx)
			if tc.root {
				if err != nil || leader != c.Node {
					t.Fatalf("leader through etcd as root = %q, %v; want %s", leader, err, c.Node)
				}
				return
			}
			if !errors.Is(err, store.ErrPermissionDenied) {
				t.Fatalf("a node certificate read the election: %q, %v; want permission denied", leader, err)
			}
			if _, err := resources.New(st).ListAssignments(ctx, c.Node); err != nil {
				t.Fatalf("a node lists its own assignments: %v", err)
			}
		})
	}
}

// TestExternalEtcd runs kat-agent against an etcd it does not embed.
func TestExternalEtcd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ports, err := freeport.TCP(2)
	if err != nil {
		t.Fatal(err)
	}
	url := func(p int) string { return "http://127.0.0.1:" + itoa(p) }
	ext, err := store.StartEmbedded(ctx, store.EmbedConfig{
		Name: "external", DataDir: t.TempDir(),
		ListenClientURLs: []string{url(ports[0])}, AdvertiseClientURLs: []string{url(ports[0])},
		ListenPeerURLs: []string{url(ports[1])}, AdvertisePeerURLs: []string{url(ports[1])},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()

	c, err := NewCluster(sharedBinaries(t), t.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	c.ExtraArgs = []string{"--etcd-endpoints", url(ports[0])}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	}()
	mustApply(t, c, filepath.Join(RepoRoot(), "examples-repo"))
	st := store.New(ext.Client())
	kvs, err := st.List(ctx, "/kat/workloads/desired/default/hello/")
	if err != nil || len(kvs) == 0 {
		t.Fatalf("the applied workload is not in the external etcd: %d keys, %v", len(kvs), err)
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "etcd")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("kat-agent created an embedded etcd data directory although --etcd-endpoints was given")
	}
	r := c.Katcall(ctx, "status")
	if r.Code != 0 || !strings.Contains(r.Stdout, "Leader:     "+c.Node) {
		t.Fatalf("status with external etcd: %s", r)
	}
}
