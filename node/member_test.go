package node

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// TestJoinEtcdPeerBeyondQuorum: a join with --etcd-peer and a wrong admin
// token is refused with 403; with spec.etcdMembers 1, one with the right
// token is refused with 409 naming the field. Nothing of the node is
// written; the quorum keeps its one member.
func TestJoinEtcdPeerBeyondQuorum(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kat := string(readFile(t, filepath.Join("testdata", "cluster.kat"))) + "  etcdMembers: 1\n"
	cfg := filepath.Join(dir, "cluster.kat")
	must(t, os.WriteFile(cfg, []byte(kat), 0o600))
	o := testOptions(t, dir)
	o.ConfigPath = cfg
	leader := runLeaderWith(t, o)
	if ttl := leader.leaseTTL(t.Context()); ttl != leaseTTLSeconds {
		t.Errorf("lease of a single-member quorum: %d s, want %d s", ttl, leaseTTLSeconds)
	}

	// The join token alone makes no member: the admin token is needed.
	wrong := filepath.Join(dir, "wrong.token")
	must(t, os.WriteFile(wrong, []byte("not-the-admin-token\n"), 0o600))
	wo := workerOptions(t, t.TempDir(), "m2", o, filepath.Join(o.DataDir, "join.token"))
	wo.EtcdPeer, wo.AdminTokenFile = true, wrong
	_, err := Open(t.Context(), wo, zerolog.Nop())
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusForbidden || !strings.Contains(err.Error(), "adminToken") {
		t.Fatalf("join --etcd-peer with a wrong admin token: %v, want 403 naming adminToken", err)
	}

	wo = workerOptions(t, t.TempDir(), "m2", o, filepath.Join(o.DataDir, "join.token"))
	wo.EtcdPeer, wo.AdminTokenFile = true, filepath.Join(o.DataDir, "admin.token")
	_, err = Open(t.Context(), wo, zerolog.Nop())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || !strings.Contains(err.Error(), "spec.etcdMembers is 1") {
		t.Fatalf("join --etcd-peer beyond spec.etcdMembers: %v, want 409 naming spec.etcdMembers", err)
	}
	if _, err := leader.repo.GetNodeRegistration(t.Context(), "m2"); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("the refused member was registered: %v", err)
	}
	if ms, err := leader.etcd.Members(t.Context()); err != nil || len(ms) != 1 {
		t.Errorf("etcd members after the refusal: %+v, %v; want the leader alone", ms, err)
	}
}

// TestAPIFrontForwards: a node that may lead but does not forwards API
// calls to the leader the leader endpoint names; it answers 503 instead of
// forwarding a forwarded request again, or when the endpoint names itself
// (an election is under way).
func TestAPIFrontForwards(t *testing.T) {
	t.Parallel()
	leader, o := runLeader(t, t.TempDir())
	token := strings.TrimSpace(string(readFile(t, filepath.Join(o.DataDir, "admin.token"))))
	front := func(name string) *httptest.Server {
		n := &Node{state: &nodeState{NodeName: name}, repo: leader.repo, ca: leader.ca, admin: token}
		f, err := newAPIFront(n)
		must(t, err)
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		return srv
	}
	getPath := func(srv *httptest.Server, path string, hdr http.Header) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		must(t, err)
		req.Header = hdr
		resp, err := srv.Client().Do(req)
		must(t, err)
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	get := func(srv *httptest.Server, hdr http.Header) (int, string) {
		hdr.Set("Authorization", "Bearer "+token)
		return getPath(srv, "/v1alpha1/nodes", hdr)
	}

	member := front("n2")
	if code, body := get(member, http.Header{}); code != http.StatusOK || !strings.Contains(body, `"n1"`) {
		t.Errorf("GET /v1alpha1/nodes through a member that does not lead: %d %s, want the leader's 200 listing n1", code, body)
	}
	if code, body := get(member, http.Header{ForwardedByHeader: []string{"n3"}}); code != http.StatusServiceUnavailable || !strings.Contains(body, "forwarded") {
		t.Errorf("a forwarded request at a member that does not lead: %d %s, want 503", code, body)
	}
	if code, body := get(front("n1"), http.Header{}); code != http.StatusServiceUnavailable || !strings.Contains(body, "election") {
		t.Errorf("a member the leader endpoint names while it does not lead: %d %s, want 503 (election under way)", code, body)
	}

	// A scrape of /metrics gets the member's own figures, even while
	// there is no leader to forward to, with the leader's credentials.
	if code, body := getPath(front("n1"), "/metrics", http.Header{"Authorization": {"Bearer " + token}}); code != http.StatusOK || !strings.Contains(body, "# TYPE kat_leader gauge") {
		t.Errorf("GET /metrics with the admin token at a member that does not lead, during an election: %d, want 200 and its own kat_ families\n%.300s", code, body)
	}
	for _, hdr := range []http.Header{{}, {"Authorization": {"Bearer wrong"}}} {
		if code, body := getPath(member, "/metrics", hdr); code != http.StatusUnauthorized || strings.Contains(body, "kat_leader") {
			t.Errorf("GET /metrics at a member with Authorization %q: %d %.200s, want 401", hdr.Get("Authorization"), code, body)
		}
	}
}
