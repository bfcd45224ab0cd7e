package pki_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kat.dws.rip/kat/pki"
)

func TestEnsureCAResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := pki.PathsIn(dir, "ca")
	first, created, err := pki.EnsureCA(p, "test-ca")
	if err != nil || !created {
		t.Fatalf("first EnsureCA: created=%v err=%v", created, err)
	}
	second, created, err := pki.EnsureCA(p, "test-ca")
	if err != nil || created {
		t.Fatalf("second EnsureCA: created=%v err=%v, want an existing CA", created, err)
	}
	if !bytes.Equal(first.CertPEM, second.CertPEM) {
		t.Fatal("second EnsureCA returned a different CA certificate")
	}
	info, err := os.Stat(p.Key)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Fatalf("ca key mode = %o, want 600", mode)
	}
}

func TestEnsureCARefusesHalfPair(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := pki.PathsIn(dir, "ca")
	if _, _, err := pki.EnsureCA(p, "test-ca"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p.Key); err != nil {
		t.Fatal(err)
	}
	_, _, err := pki.EnsureCA(p, "test-ca")
	if err == nil || !strings.Contains(err.Error(), "only one of the pair exists") {
		t.Fatalf("EnsureCA with a missing key: err = %v, want a half-pair error", err)
	}
}

func TestEnsureLeafReissuesWhenNamesChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, _, err := pki.EnsureCA(pki.PathsIn(dir, "ca"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	p := pki.PathsIn(dir, "leader")
	req := pki.LeafRequest{CommonName: "n1", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}}
	a, issued, err := pki.EnsureLeaf(p, ca, req)
	if err != nil || !issued {
		t.Fatalf("first EnsureLeaf: issued=%v err=%v", issued, err)
	}
	b, issued, err := pki.EnsureLeaf(p, ca, req)
	if err != nil || issued || !bytes.Equal(a.CertPEM, b.CertPEM) {
		t.Fatalf("same request: issued=%v err=%v, want the stored certificate", issued, err)
	}
	req.IPs = append(req.IPs, net.ParseIP("10.1.2.3"))
	c, issued, err := pki.EnsureLeaf(p, ca, req)
	if err != nil || !issued || bytes.Equal(a.CertPEM, c.CertPEM) {
		t.Fatalf("new address: issued=%v err=%v, want a new certificate", issued, err)
	}
	cert, err := pki.ParseCertificate(c.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname("10.1.2.3"); err != nil {
		t.Fatalf("reissued certificate does not cover the new address: %v", err)
	}
}

func TestSignCSRForcesCommonName(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	csr, _, err := pki.NewCSR("i-want-to-be-leader", []string{"leader"}, []net.IP{net.ParseIP("10.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignCSR(csr, pki.LeafRequest{CommonName: "node-2", DNSNames: []string{"node-2"}, IPs: []net.IP{net.ParseIP("10.0.0.2")}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "node-2" {
		t.Fatalf("common name = %q, want node-2", cert.Subject.CommonName)
	}
	if len(cert.DNSNames) != 1 || cert.DNSNames[0] != "node-2" || len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("10.0.0.2")) {
		t.Fatalf("names %v %v: want the signer's (node-2, 10.0.0.2), never the request's", cert.DNSNames, cert.IPAddresses)
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		t.Fatalf("not signed by the CA: %v", err)
	}
	if _, err := ca.SignCSR([]byte("garbage"), pki.LeafRequest{CommonName: "x"}); err == nil {
		t.Fatal("SignCSR accepted garbage")
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(pki.LeafRequest{CommonName: "leader", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(pki.LeafRequest{CommonName: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS, err = pki.ServerTLSConfig(server, ca.Pool(), true)
	if err != nil {
		t.Fatal(err)
	}
	srv.StartTLS()
	defer srv.Close()

	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Issue(pki.LeafRequest{CommonName: "stranger"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		leaf   *pki.Leaf
		wantOK bool
	}{
		{name: "cluster client certificate", leaf: client, wantOK: true},
		{name: "no client certificate", leaf: nil},
		{name: "certificate from another CA", leaf: stranger},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pki.ClientTLSConfig(ca.Pool(), tc.leaf)
			if err != nil {
				t.Fatal(err)
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := c.Get(srv.URL)
			if !tc.wantOK {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("request succeeded with status %d, want a TLS failure", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("request failed: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if string(body) != "agent" {
				t.Fatalf("server saw client %q, want agent", body)
			}
		})
	}
}

func TestWriteFileAtomicMode(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "secret")
	if err := pki.WriteFileAtomic(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %o, want 600", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
}
