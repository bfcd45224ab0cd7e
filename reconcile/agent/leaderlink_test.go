package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// fakeLeader is a leader's API that records what it is sent: method, path,
// the client certificate's common name and the body.
type fakeLeader struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func startFakeLeader(t *testing.T, ca *pki.CA) *fakeLeader {
	t.Helper()
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "leader", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerTLSConfig(leaf, ca.Pool(), true)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeLeader{}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		cn := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		f.mu.Lock()
		f.seen = append(f.seen, r.Method+" "+r.URL.Path+" cn="+cn+" "+string(body))
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	f.srv.TLS = cfg
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLeader) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// TestLeaderLinkFollowsTheLeader: a worker's status, build records and
// events go to the API of the leader etcd names, with the node's
// certificate, to the node's own paths; when another node leads, the next
// write goes to it without a new link; with no leader recorded, the write
// fails saying so.
func TestLeaderLinkFollowsTheLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue(pki.LeafRequest{CommonName: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	repo := resources.New(storetest.New(t))
	link := NewLeaderLink("w1", repo, ca.CertPEM, cert)

	if err := link.RecordStatus(ctx, api.NodeStatus{NodeName: "w1"}); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("with no leader recorded: got %v, want an error wrapping ErrNotFound", err)
	}

	first, second := startFakeLeader(t, ca), startFakeLeader(t, ca)
	if err := repo.SetLeaderEndpoint(ctx, api.Leader{Node: "n1", APIURL: first.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if err := link.RecordStatus(ctx, api.NodeStatus{NodeName: "w1", Timestamp: 7}); err != nil {
		t.Fatal(err)
	}
	rec := api.Build{Namespace: "default", Workload: "web", Commit: "abc123", Node: "w1", State: "Succeeded"}
	if err := link.PutBuildRecord(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := repo.SetLeaderEndpoint(ctx, api.Leader{Node: "n2", APIURL: second.srv.URL}); err != nil {
		t.Fatal(err)
	}
	if err := link.AppendEvent(ctx, api.Event{Type: api.EventWarning, Reason: "BuildFailed", Message: "m"}); err != nil {
		t.Fatal(err)
	}

	got := first.requests()
	if len(got) != 2 ||
		!strings.HasPrefix(got[0], "POST /v1alpha1/nodes/w1/status cn=w1 ") || !strings.Contains(got[0], `"timestamp":7`) ||
		!strings.HasPrefix(got[1], "PUT /v1alpha1/nodes/w1/builds/default/web/abc123 cn=w1 ") || !strings.Contains(got[1], `"state":"Succeeded"`) {
		t.Errorf("the first leader got %q, want the status and the build record of w1 with its certificate", got)
	}
	got = second.requests()
	if len(got) != 1 || !strings.HasPrefix(got[0], "POST /v1alpha1/nodes/w1/events cn=w1 ") || !strings.Contains(got[0], `"BuildFailed"`) {
		t.Errorf("the new leader got %q, want the event of w1 with its certificate", got)
	}
}
