package store_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// testPKI is a throwaway cluster CA with one server and one client
// certificate, made with the project's own pki package.
type testPKI struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	client                        tls.Certificate
	ca                            *pki.CA
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, _, err := pki.EnsureCA(pki.PathsIn(dir, "ca"), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	server := pki.PathsIn(dir, "server")
	if _, _, err := pki.EnsureLeaf(server, ca, pki.LeafRequest{
		CommonName: "server", DNSNames: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
	}); err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(pki.LeafRequest{CommonName: "client"})
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := client.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{
		caFile: filepath.Join(dir, "ca.crt"), serverCert: server.Cert, serverKey: server.Key,
		pool: ca.Pool(), client: clientCert, ca: ca,
	}
}

func TestEmbeddedClientTLS(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	cfg := storetest.Config(t)
	cfg.ListenClientURLs = []string{"https://127.0.0.1:0"}
	cfg.ClientTLS = &store.TLSFiles{CertFile: p.serverCert, KeyFile: p.serverKey, TrustedCAFile: p.caFile}
	emb := storetest.Start(t, cfg)
	urls := emb.ClientURLs()
	if len(urls) != 1 || !strings.HasPrefix(urls[0], "https://127.0.0.1:") {
		t.Fatalf("ClientURLs = %q, want one https URL", urls)
	}

	tests := []struct {
		name    string
		tls     *tls.Config
		wantErr string // the diagnosis the error must carry
	}{
		{name: "client certificate", tls: &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}, MinVersion: tls.VersionTLS12}},
		{name: "no client certificate", tls: &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}, wantErr: "certificate required"},
		{name: "no TLS", tls: nil, wantErr: "DialConfig.TLS is nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			st, err := store.Dial(ctx, store.DialConfig{Endpoints: urls, TLS: tc.tls, DialTimeout: time.Second})
			if tc.wantErr != "" {
				if err == nil {
					_ = st.Close()
					t.Fatal("Dial succeeded")
				}
				for _, sub := range []string{urls[0], tc.wantErr} {
					if !strings.Contains(err.Error(), sub) {
						t.Errorf("error %q does not mention %q", err, sub)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			mustPut(t, st, "/tls/k", "v")
			if kv, err := st.Get(ctx, "/tls/k"); err != nil || string(kv.Value) != "v" {
				t.Fatalf("Get = %v, %v", kv, err)
			}
		})
	}
}
