package apiserver_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// TestNodeReportsWithItsCertificate: a node posts its status with its cluster
// certificate and no token, but only for itself.
func TestNodeReportsWithItsCertificate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	for _, n := range []string{"n1", "n2"} {
		if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	client := nodeClient(t, f, "n1")
	if err := client.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix()}); err != nil {
		t.Fatalf("n1 reporting for itself: %v", err)
	}
	if err := client.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n2"}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("n1 reporting for n2: %v, want 401", err)
	}
	if _, err := client.ListNodes(ctx); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("a node certificate opened another endpoint: %v, want 401", err)
	}
	if st, err := f.repo.GetNodeStatus(ctx, "n2"); err == nil {
		t.Fatalf("n2's status was written: %+v", st)
	}
}

// nodeClient serves f's repository over mutual TLS (as the leader does:
// client certificates verified when given) and returns a client holding the
// certificate of node name and no token.
func nodeClient(t *testing.T, f *fixture, name string) *apiclient.Client {
	t.Helper()
	return nodeClients(t, f, nil, name)[0]
}

// nodeClients is nodeClient for several nodes of one server, its
// configuration changed by mod (may be nil); the last client holds the
// admin token and no certificate.
func nodeClients(t *testing.T, f *fixture, mod func(*apiserver.Config), names ...string) []*apiclient.Client {
	t.Helper()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string) *pki.Leaf {
		l, err := ca.Issue(pki.LeafRequest{CommonName: name, DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	cfg := apiserver.Config{Repo: f.repo, AdminTokenHash: resources.HashToken(token), RateLimit: -1}
	if mod != nil {
		mod(&cfg)
	}
	s, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.TLS, err = pki.ServerTLSConfig(issue("server"), ca.Pool(), false)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLS.ClientAuth = tls.VerifyClientCertIfGiven
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var out []*apiclient.Client
	for _, name := range names {
		client, err := apiclient.New(apiclient.Config{Server: srv.URL, CAData: ca.CertPEM, ClientCert: issue(name)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, client)
	}
	admin, err := apiclient.New(apiclient.Config{Server: srv.URL, CAData: ca.CertPEM, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return append(out, admin)
}
