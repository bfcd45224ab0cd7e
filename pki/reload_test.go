package pki

import (
	"context"
	"crypto/tls"
	"io"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/internal/testenv"
)

// TestServerTLSReloadsItsFiles serves HTTPS with a ServerTLS and checks,
// with a real TLS client on a new connection each time, that a renewed
// certificate is presented from the next handshake on, that a replacement
// that does not load keeps the last good certificate, and that a rotated
// CA bundle admits clients of the new CA.
func TestServerTLSReloadsItsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leafPaths, caFile := PathsIn(dir, "node"), filepath.Join(dir, "ca.crt")
	ca1, err := NewCA("ca-1")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *CA, cn string) *Leaf {
		t.Helper()
		l, err := ca.Issue(LeafRequest{CommonName: cn, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	writeFile := func(path string, data []byte) {
		t.Helper()
		if err := WriteFileAtomic(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	renew := func(l *Leaf) {
		t.Helper()
		if err := writePair(leafPaths, l.CertPEM, l.KeyPEM); err != nil {
			t.Fatal(err)
		}
	}
	first := issue(ca1, "server")
	renew(first)
	writeFile(caFile, ca1.CertPEM)

	logs := &testenv.SyncBuffer{}
	s, err := NewServerTLS(ServerFiles{Leaf: leafPaths, ClientCAFile: caFile, ClientAuth: tls.RequireAndVerifyClientCert, Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watching := make(chan error, 1)
	go func() { watching <- s.Run(ctx) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
		}),
		TLSConfig: s.Config(), ReadHeaderTimeout: 10 * time.Second,
	}
	serving := make(chan error, 1)
	go func() { serving <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-serving
		cancel()
		if err := <-watching; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	// get makes a request on a new connection as client, trusting roots,
	// and returns the serial of the certificate the server presented.
	get := func(client *Leaf, roots *CA) (*big.Int, error) {
		t.Helper()
		cfg, err := ClientTLSConfig(roots.Pool(), client)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, ForceAttemptHTTP2: true}}
		resp, err := c.Get("https://" + ln.Addr().String() + "/")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err != nil {
			return nil, err
		}
		return resp.TLS.PeerCertificates[0].SerialNumber, nil
	}
	client1 := issue(ca1, "client-1")
	wantSerial := func(what string, want *Leaf) {
		t.Helper()
		got, err := get(client1, ca1)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		cert, err := ParseCertificate(want.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cmp(cert.SerialNumber) != 0 {
			t.Fatalf("%s: the server presented serial %s, want %s", what, got, cert.SerialNumber)
		}
	}
	wantSerial("first certificate", first)

	second := issue(ca1, "server")
	renew(second)
	wantSerial("renewed certificate, next handshake", second)

	for _, bad := range []struct {
		name, file string
		write      func()
	}{
		{"a certificate that is not PEM", leafPaths.Cert, func() { writeFile(leafPaths.Cert, []byte("not a certificate\n")) }},
		{"a key that does not match", leafPaths.Key, func() { writeFile(leafPaths.Key, issue(ca1, "x").KeyPEM) }},
		{"a CA bundle that is not PEM", caFile, func() { writeFile(caFile, []byte("garbage")) }},
	} {
		bad.write()
		wantSerial(bad.name+" keeps the last good certificate", second)
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), bad.file) {
			t.Fatalf("%s: Err = %v, want an error naming %s", bad.name, err, bad.file)
		}
		renew(second)
		writeFile(caFile, ca1.CertPEM)
	}
	third := issue(ca1, "server")
	renew(third)
	writeFile(caFile, ca1.CertPEM)
	wantSerial("a good certificate after bad ones", third)
	if err := s.Err(); err != nil {
		t.Fatalf("Err = %v after the files were fixed", err)
	}
	if !strings.Contains(logs.String(), "keeping the last good value") {
		t.Errorf("the bad files were not logged:\n%s", logs.String())
	}

	// A client of a new CA is refused until the bundle holds that CA.
	ca2, err := NewCA("ca-2")
	if err != nil {
		t.Fatal(err)
	}
	client2 := issue(ca2, "client-2")
	if _, err := get(client2, ca1); err == nil {
		t.Fatal("a client of a CA outside the bundle was served")
	}
	writeFile(caFile, append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...))
	if _, err := get(client2, ca1); err != nil {
		t.Fatalf("a client of a CA added to the bundle: %v", err)
	}
	if _, err := get(client1, ca1); err != nil {
		t.Fatalf("a client of the first CA after the bundle grew: %v", err)
	}
}

// TestNewServerTLSRefusesBadFiles: the first load must succeed.
func TestNewServerTLSRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := PathsIn(dir, "node")
	_, err := NewServerTLS(ServerFiles{Leaf: p, ClientCAFile: filepath.Join(dir, "ca.crt")})
	if err == nil || !strings.Contains(err.Error(), p.Cert) {
		t.Fatalf("NewServerTLS of missing files: %v, want an error naming %s", err, p.Cert)
	}
}
