package apiclient_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki"
)

// TestHTTP1: against a server that offers HTTP/2, a client speaks HTTP/2
// unless Config.HTTP1 asks for HTTP/1.1, as an agent's reports do.
func TestHTTP1(t *testing.T) {
	t.Parallel()
	ca, _, err := pki.EnsureCA(pki.PathsIn(filepath.Join(t.TempDir(), "ca"), "ca"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "server", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	var proto atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(int32(r.ProtoMajor))
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.EnableHTTP2 = true
	if srv.TLS, err = pki.ServerTLSConfig(leaf, ca.Pool(), false); err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	for _, http1 := range []bool{false, true} {
		c, err := apiclient.New(apiclient.Config{Server: srv.URL, CAData: ca.CertPEM, HTTP1: http1})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PostNodeStatus(t.Context(), api.NodeStatus{NodeName: "n1"}); err != nil {
			t.Fatal(err)
		}
		want := int32(2)
		if http1 {
			want = 1
		}
		if got := proto.Load(); got != want {
			t.Errorf("HTTP1 %v: the request came in HTTP/%d, want HTTP/%d", http1, got, want)
		}
	}
}
