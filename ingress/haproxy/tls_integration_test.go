package haproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// testCA signs leaves for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf is a signed certificate: its PEM, its key's PEM and DER, its
// fingerprint.
type leaf struct {
	chainPEM, keyPEM, keyDER []byte
	fingerprint              string
	serial                   *big.Int
}

func (ca *testCA) sign(t testing.TB, serial int64, hosts ...string) leaf {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(12 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return leaf{
		chainPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:      pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		keyDER:      kder,
		fingerprint: hex.EncodeToString(sum[:]),
		serial:      big.NewInt(serial),
	}
}

func (l leaf) cert(hosts ...string) Certificate {
	return NewCertificate(l.fingerprint, hosts, l.chainPEM, l.keyPEM)
}

// applyTLS brings the proxy's certificates and maps to want and
// challenges, as the agent does, and returns the refusals.
func (p *proxy) applyTLS(want []Certificate, challenges map[string]string) error {
	p.t.Helper()
	_, err := p.client.ApplyTLS(context.Background(), p.dir, want, challenges)
	return err
}

// getTLS fetches path over HTTPS with SNI host, trusting pool, and returns
// "status body" and the served leaf's serial.
func (p *proxy) getTLS(host, path string, pool *x509.CertPool) (string, *big.Int) {
	p.t.Helper()
	var serial *big.Int
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: host, RootCAs: pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			serial = cs.PeerCertificates[0].SerialNumber
			return nil
		}}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d%s", p.httpsPort, path), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Host = host
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "error " + err.Error(), serial
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b))), serial
}

// TestHAProxyTLS runs the real haproxy: a certificate pushed in memory is
// served by SNI and verifies against its CA; the host's plain HTTP
// requests are redirected (308) while a host without a certificate keeps
// plain HTTP; an ACME challenge is answered over HTTP before the
// redirect; a renewed certificate replaces the old one; a certificate
// HAProxy cannot load is never listed, the old one stays served and the
// refusal carries no key material.
func TestHAProxyTLS(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	ca := newTestCA(t)
	a1, b1 := backend(t, "a1", nil), backend(t, "b1", nil)
	p.apply(routes("d", "a", rule("a.test", "/", 80, api.IngressBackend{InstanceID: "a-1", Addr: a1})),
		routes("d", "b", rule("b.test", "/", 80, api.IngressBackend{InstanceID: "b-1", Addr: b1})))

	first := ca.sign(t, 100, "a.test")
	challenges := map[string]string{"tok-1": "tok-1.thumb"}
	if err := p.applyTLS([]Certificate{first.cert("a.test")}, challenges); err != nil {
		t.Fatal(err)
	}
	if got, serial := p.getTLS("a.test", "/x", ca.pool); got != "200 a1" || serial.Cmp(first.serial) != 0 {
		t.Fatalf("https a.test = %q (serial %v), want 200 a1 with serial %v", got, serial, first.serial)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/x?q=1", p.port), nil)
	req.Host = "a.test"
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://a.test/x?q=1" {
		t.Errorf("http a.test = %d to %q, want 308 to https://a.test/x?q=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := p.get("b.test", "/"); got != "200 b1" {
		t.Errorf("http b.test (no certificate) = %q, want 200 b1 without a redirect", got)
	}
	if got, _ := p.getTLS("b.test", "/", ca.pool); !strings.Contains(got, "certificate") {
		t.Errorf("https b.test = %q, want the default certificate, which the test CA does not verify", got)
	}
	if got := p.get("a.test", "/.well-known/acme-challenge/tok-1"); got != "200 tok-1.thumb" {
		t.Errorf("ACME challenge over http = %q, want 200 tok-1.thumb (before the redirect)", got)
	}
	// A second pass finds nothing to do.
	o, err := p.client.ObserveTLS(context.Background(), p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if load, remove := PlanCertificates([]Certificate{first.cert("a.test")}, o, p.dir), PlanRemovals([]Certificate{first.cert("a.test")}, o.Listed, o.Loaded, p.dir); len(load)+len(remove) != 0 {
		t.Errorf("second plan: load %q, remove %q; want nothing", load, remove)
	}
	if cmds := PlanTLSMaps([]Certificate{first.cert("a.test")}, o.Listed, challenges, o, p.dir); len(cmds) != 0 {
		t.Errorf("second plan of the maps = %q, want nothing", cmds)
	}

	// A renewal: the new certificate is served, the old one is gone.
	renewed := ca.sign(t, 101, "a.test")
	if err := p.applyTLS([]Certificate{renewed.cert("a.test")}, nil); err != nil {
		t.Fatal(err)
	}
	if got, serial := p.getTLS("a.test", "/", ca.pool); got != "200 a1" || serial.Cmp(renewed.serial) != 0 {
		t.Errorf("after renewal https a.test = %q (serial %v), want serial %v", got, serial, renewed.serial)
	}
	req, _ = http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/.well-known/acme-challenge/tok-1", p.port), nil)
	req.Host = "a.test"
	if resp, err = noRedirect.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Errorf("withdrawn challenge over http = %d, want the redirect (308) as for any path", resp.StatusCode)
	}
	if o, _ := p.client.ObserveTLS(context.Background(), p.dir); len(o.Loaded) != 1 || !o.Loaded[renewed.cert("a.test").Name()] {
		t.Errorf("loaded after renewal = %v, want only %s", o.Loaded, renewed.cert("a.test").Name())
	}

	// A key that does not match its certificate: refused, never listed,
	// the renewed certificate still served, the key nowhere in the error.
	other := ca.sign(t, 102, "a.test")
	bad := NewCertificate(other.fingerprint, []string{"a.test"}, other.chainPEM, first.keyPEM)
	err = p.applyTLS([]Certificate{bad}, nil)
	if err == nil {
		t.Fatal("a certificate with another's key was loaded")
	}
	for _, secret := range []string{string(first.keyPEM), "PRIVATE KEY", base64.StdEncoding.EncodeToString(first.keyDER)[:40]} {
		if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprint(bad), secret) || strings.Contains(fmt.Sprintf("%#v", bad), secret) {
			t.Errorf("the refusal or the certificate's printing carries key material: %v", err)
		}
	}
	t.Logf("refusal: %v", err)
	if got, serial := p.getTLS("a.test", "/", ca.pool); got != "200 a1" || serial.Cmp(renewed.serial) != 0 {
		t.Errorf("after a refused certificate https a.test = %q (serial %v), want the renewed one (%v)", got, serial, renewed.serial)
	}
	// The refused load left no transaction behind: b.test's certificate
	// loads beside the refused one.
	bcert := ca.sign(t, 103, "b.test")
	if err := p.applyTLS([]Certificate{bad, bcert.cert("b.test")}, nil); err == nil || strings.Contains(err.Error(), bcert.cert("b.test").Name()) {
		t.Errorf("with a refused certificate beside it, b.test's = %v; want only the refused one to fail", err)
	}
	if got, serial := p.getTLS("b.test", "/", ca.pool); got != "200 b1" || serial.Cmp(bcert.serial) != 0 {
		t.Errorf("https b.test = %q (serial %v), want 200 b1 with serial %v", got, serial, bcert.serial)
	}
}
