package store_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// testPKI is a throwaway CA with one server and one client certificate.
type testPKI struct {
	caFile, serverCert, serverKey string
	pool                          *x509.CertPool
	client                        tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey := mustKey(t)
	caTpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, cn string, usage []x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := mustKey(t)
		tpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  usage,
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tpl, ca, key.Public(), caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	p := &testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = writePEM(t, dir, "ca.crt", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, "server", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
	p.serverCert = writePEM(t, dir, "server.crt", "CERTIFICATE", srvDER)
	p.serverKey = writePEM(t, dir, "server.key", "PRIVATE KEY", marshalKey(t, srvKey))
	cliDER, cliKey := issue(3, "client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
	p.client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return p
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEmbeddedClientTLS(t *testing.T) {
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
