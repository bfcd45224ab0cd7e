package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// TestWorkerLeastPrivilege: a joined worker's own credentials (its etcd
// user, the CN of its certificate) read what its agent needs, and every
// write to etcd is refused: desired state, assignments (its own and
// another's), another node's and its own status and heartbeat, the
// cluster's configuration and tokens, registrations, build records, events
// and any other key. Through the leader's API, with its certificate, it
// writes its own status, build records and events, and nobody else's. A
// worker certificate is no etcd peer. Once the node is forgotten, its open
// etcd connection loses its reads.
func TestWorkerLeastPrivilege(t *testing.T) {
	t.Parallel()
	leader, lo := runLeader(t, t.TempDir())
	ctx := t.Context()
	w, err := Open(ctx, workerOptions(t, t.TempDir(), "w1", lo, filepath.Join(lo.DataDir, "join.token")), zerolog.Nop())
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	t.Cleanup(w.Close)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	for _, key := range []string{resources.AssignmentKey("w1", "web-1"), resources.AssignmentKey("n1", "web-2")} {
		must(t, leader.st.Put(ctx, key, []byte(`{}`)))
	}
	_, err = leader.repo.WriteSecretRefs(ctx, []api.SecretRef{{Node: "w1", Namespace: "default", Name: "db", Version: 1},
		{Node: "n1", Namespace: "default", Name: "other", Version: 1}}, nil)
	must(t, err)

	t.Run("etcd writes refused", func(t *testing.T) {
		for _, key := range []string{
			resources.MetaKey("default", "web"),
			resources.ManifestKey("default", "web", "workload.kat"),
			resources.StatusKey("default", "web"),
			resources.AssignmentKey("w1", "web-1"),
			resources.AssignmentKey("w1", "new"),
			resources.AssignmentKey("n1", "web-2"),
			resources.SecretRefKey("w1", "default", "db"),
			resources.NodeStatusKey("w1"),
			resources.NodeHeartbeatKey("w1"),
			resources.NodeStatusKey("n1"),
			resources.NodeHeartbeatKey("n1"),
			resources.NodeRegistrationKey("w1"),
			resources.NodeRegistrationKey("w2"),
			"/kat/config/cluster",
			"/kat/config/cluster_uid",
			"/kat/config/leader_endpoint",
			"/kat/config/join_token_sha256",
			"/kat/config/admin_token_sha256",
			resources.BuildRecordKey("default", "web", commit, "w1"),
			"/kat/events/0",
			"/kat/leader_election/x",
			"/kat/schema_version",
			"/kat/anything",
			"/elsewhere",
		} {
			if err := w.st.Put(ctx, key, []byte(`{}`)); !errors.Is(err, store.ErrPermissionDenied) {
				t.Errorf("put %s: got %v, want permission denied", key, err)
			}
			if err := w.st.Delete(ctx, key); !errors.Is(err, store.ErrPermissionDenied) {
				t.Errorf("delete %s: got %v, want permission denied", key, err)
			}
		}
		_, err := w.st.DoTransaction(ctx, nil, []store.Op{{Type: store.OpPut, Key: resources.AssignmentKey("w1", "tx"), Value: []byte(`{}`)}}, nil)
		if !errors.Is(err, store.ErrPermissionDenied) {
			t.Errorf("a transaction putting an assignment: got %v, want permission denied", err)
		}
	})

	t.Run("etcd reads", func(t *testing.T) {
		for _, key := range []string{"/kat/config/join_token_sha256", "/kat/config/admin_token_sha256", resources.NodeStatusKey("n1"),
			resources.AssignmentKey("n1", "web-2"), resources.MetaKey("default", "web"), resources.SecretRefKey("n1", "default", "other"),
			resources.SecretKey("default", "db")} {
			if _, err := w.st.Get(ctx, key); !errors.Is(err, store.ErrPermissionDenied) {
				t.Errorf("get %s: got %v, want permission denied", key, err)
			}
		}
		for _, prefix := range []string{"/kat/", resources.AssignmentsPrefix(), resources.NodeAssignmentsPrefix("n1"), resources.SecretRefsPrefix(),
			resources.NodeSecretRefsPrefix("n1"), resources.SecretsPrefix("")} {
			if _, err := w.st.List(ctx, prefix); !errors.Is(err, store.ErrPermissionDenied) {
				t.Errorf("list %s: got %v, want permission denied", prefix, err)
			}
		}
		if as, err := w.repo.ListAssignments(ctx, "w1"); err != nil || len(as) != 1 {
			t.Errorf("the worker lists its assignments: %d, %v", len(as), err)
		}
		// The leader's secretrefs loop removes references no instance
		// uses, as this one: it is written again before each try.
		polltest.UntilErr(t, 10*time.Second, "the worker listing its secret reference", func() error {
			if _, err := leader.repo.WriteSecretRefs(ctx, []api.SecretRef{{Node: "w1", Namespace: "default", Name: "db", Version: 1}}, nil); err != nil {
				return err
			}
			kvs, err := w.st.List(ctx, resources.NodeSecretRefsPrefix("w1"))
			if errors.Is(err, store.ErrPermissionDenied) {
				t.Fatalf("the worker lists its secret references: %v", err)
			}
			if err != nil {
				return err
			}
			if len(kvs) != 1 {
				return fmt.Errorf("%d references", len(kvs))
			}
			return nil
		})
		if _, err := w.repo.ClusterInfo(ctx); err != nil {
			t.Errorf("the worker reads the cluster configuration: %v", err)
		}
		if _, err := w.repo.GetLeaderEndpoint(ctx); err != nil {
			t.Errorf("the worker reads the leader endpoint: %v", err)
		}
		if _, err := w.repo.GetNodeStatus(ctx, "w1"); err != nil && !errors.Is(err, resources.ErrNotFound) {
			t.Errorf("the worker reads its status: %v", err)
		}
	})

	t.Run("API writes", func(t *testing.T) {
		ep, err := leader.repo.GetLeaderEndpoint(ctx)
		must(t, err)
		c, err := apiclient.New(apiclient.Config{Server: ep.APIURL, CAData: w.ca.CertPEM, ClientCert: w.leaf})
		must(t, err)
		record := func(node string) []byte {
			b, err := json.Marshal(map[string]string{"node": node, "namespace": "default", "workload": "web", "commit": commit, "state": "Succeeded"})
			must(t, err)
			return b
		}
		ev := api.Event{Type: api.EventWarning, Object: "workload/default/web", Reason: "BuildFailed", Message: "on w1"}
		// Its own facts.
		must(t, c.PostNodeStatus(ctx, api.NodeStatus{NodeName: "w1", NodeUID: "x"}))
		must(t, c.PutNodeBuildRecord(ctx, "w1", "default", "web", commit, record("w1")))
		must(t, c.PostNodeEvent(ctx, "w1", ev))
		if kvs, err := leader.repo.ListBuildRecordsJSON(ctx, "default", "web", commit); err != nil || len(kvs) != 1 ||
			kvs[0].Key != resources.BuildRecordKey("default", "web", commit, "w1") {
			t.Errorf("build records after the worker stored its own: %v, %v", kvs, err)
		}
		evs, err := leader.repo.ListEvents(ctx, 0)
		must(t, err)
		if len(evs) == 0 || evs[len(evs)-1].Message != "on w1" {
			t.Errorf("events after the worker recorded one: %+v", evs)
		}
		// Another node's: refused, nothing written.
		for name, err := range map[string]error{
			"status of n1":       c.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n1", NodeUID: "x"}),
			"build record of n1": c.PutNodeBuildRecord(ctx, "n1", "default", "web", commit, record("n1")),
			"event of n1":        c.PostNodeEvent(ctx, "n1", ev),
		} {
			var apiErr *api.Error
			if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with w1's certificate: got %v, want 401", name, err)
			}
		}
		// Its own URL, another node's record: 400.
		var apiErr *api.Error
		if err := c.PutNodeBuildRecord(ctx, "w1", "default", "web", commit, record("n1")); !errors.As(err, &apiErr) ||
			apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "node") {
			t.Errorf("a record naming n1 under w1's URL: got %v, want 400 naming the node", err)
		}
		if kvs, err := leader.repo.ListBuildRecordsJSON(ctx, "default", "web", commit); err != nil || len(kvs) != 1 {
			t.Errorf("refused records were written: %v, %v", kvs, err)
		}
	})

	t.Run("no peer", func(t *testing.T) {
		peer := fmt.Sprintf("https://127.0.0.1:%d/members", lo.EtcdPeerPort)
		get := func(leaf *pki.Leaf) error {
			cfg, err := pki.ClientTLSConfig(leader.ca.Pool(), leaf)
			must(t, err)
			tr := &http.Transport{TLSClientConfig: cfg}
			defer tr.CloseIdleConnections()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer, nil)
			must(t, err)
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %s", resp.Status)
			}
			return nil
		}
		peerPaths := pki.PathsIn(leader.dir.pkiDir(), "etcd-peer")
		peerLeaf := &pki.Leaf{CertPEM: readFile(t, peerPaths.Cert), KeyPEM: readFile(t, peerPaths.Key)}
		if err := get(peerLeaf); err != nil {
			t.Fatalf("the member's peer certificate at its peer URL: %v", err)
		}
		if err := get(w.leaf); err == nil {
			t.Error("a worker's certificate was served at the peer URL")
		}
		if err := get(leader.leaf); err == nil {
			t.Error("a node certificate (not the peer certificate) was served at the peer URL")
		}
	})

	t.Run("forgotten", func(t *testing.T) {
		// katcall delete node --force: the route removes the node's etcd
		// user (apiserver.Config.ForgetNode) with its records.
		admin := katcallClient(t, leader.KatcallConfigPath())
		must(t, admin.DeleteNode(ctx, "w1", true))
		if _, err := w.repo.ListAssignments(ctx, "w1"); !errors.Is(err, store.ErrPermissionDenied) {
			t.Errorf("a forgotten node lists its assignments on its open connection: got %v, want permission denied", err)
		}
	})
}

// TestJoinRefusesReservedName: a node cannot join as "root", the etcd
// administrator's user; nothing is registered.
func TestJoinRefusesReservedName(t *testing.T) {
	t.Parallel()
	leader, lo := runLeader(t, t.TempDir())
	tok, err := pki.ParseJoinToken(string(readFile(t, filepath.Join(lo.DataDir, "join.token"))))
	must(t, err)
	csr, _, err := pki.NewCSR("root", nil, nil)
	must(t, err)
	ctx := t.Context()
	_, err = apiclient.Join(ctx, fmt.Sprintf("https://127.0.0.1:%d", lo.APIPort), tok, api.JoinRequest{
		NodeName: store.RootUser, NodeUID: "u", CSR: string(csr), AdvertiseAddress: "127.0.0.1", AgentPort: 1,
	})
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "nodeName") {
		t.Fatalf("join as root: got %v, want 400 naming nodeName", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, store.RootUser); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a refused join registered root: %v", err)
	}
}

// TestOpenEnablesAuthOnAnOldDataDir: a data directory from before etcd
// authentication (auth off, no users) opens with auth on, a user for this
// node and for every registered node, and the cluster's records intact.
func TestOpenEnablesAuthOnAnOldDataDir(t *testing.T) {
	t.Parallel()
	o := testOptions(t, t.TempDir())
	ctx := t.Context()
	n, err := Open(ctx, o, zerolog.Nop())
	must(t, err)
	// A worker joined before: registered, no etcd user.
	must(t, n.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "w9", UID: "u9"}))
	// Back to how such a directory looked.
	cli := n.etcd.Client()
	_, err = cli.AuthDisable(ctx)
	must(t, err)
	must(t, n.etcd.RemoveUser(ctx, "n1"))
	_, err = cli.UserDelete(ctx, store.RootUser)
	must(t, err)
	n = reopen(t, n, o)
	if on, err := n.etcd.AuthEnabled(ctx); err != nil || !on {
		t.Fatalf("auth after the upgrade: %v, %v", on, err)
	}
	for _, user := range []string{"n1", "w9", store.RootUser} {
		if _, err := n.etcd.Client().UserGet(ctx, user); err != nil {
			t.Errorf("user %s after the upgrade: %v", user, err)
		}
	}
	if _, err := n.repo.GetNodeRegistration(ctx, "w9"); err != nil {
		t.Errorf("registration of w9 after the upgrade: %v", err)
	}
}
