package node

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/webhook"
)

// TestRunReloadsFilesWithoutARestart runs a leader and changes the files it
// reads while it runs: a rotated webhook secret is accepted, and the old
// one refused, on the next webhook; a secret file that becomes empty keeps
// the last good secret; a renewed node certificate is presented by the API
// and the agent API on the next TLS handshake; a certificate replaced by
// garbage keeps the last good one.
func TestRunReloadsFilesWithoutARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "webhook.secret")
	writeAtomic(t, secretFile, "first\n")
	repoURL := "file://" + filepath.Join(dir, "config.git")
	base := readFile(t, testClusterKat(t, dir))
	config := filepath.Join(dir, "cluster.kat")
	writeAtomic(t, config, string(base)+fmt.Sprintf("  gitops:\n    repository: %s\n    webhookSecretFile: %s\n", repoURL, secretFile))
	o := testOptions(t, dir)
	o.ConfigPath = config
	n := runLeaderWith(t, o)

	tlsCfg := &tls.Config{RootCAs: n.ca.Pool(), MinVersion: tls.VersionTLS12}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}
	hookURL := fmt.Sprintf("https://127.0.0.1:%d/v1alpha1/webhooks/generic", o.APIPort)
	body := []byte(fmt.Sprintf(`{"repository":%q,"ref":"main"}`, repoURL))
	hook := func(secret string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, hookURL, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Kat-Signature", webhook.Sign([]byte(secret), body))
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	wantHook := func(what, secret string, want int) {
		t.Helper()
		got, err := hook(secret)
		if err != nil || got != want {
			t.Fatalf("%s: webhook answered %d (%v), want %d", what, got, err, want)
		}
	}
	// The config repo's source must be running to take the push.
	polltest.UntilErr(t, 60*time.Second, "the leader accepts a webhook", func() error {
		got, err := hook("first")
		if err == nil && got != http.StatusAccepted {
			err = fmt.Errorf("answered %d", got)
		}
		return err
	})
	writeAtomic(t, secretFile, "second\n")
	wantHook("the rotated-out secret", "first", http.StatusUnauthorized)
	wantHook("the new secret", "second", http.StatusAccepted)
	if err := os.WriteFile(secretFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantHook("the last good secret, the file empty", "second", http.StatusAccepted)

	// The serving certificate: the API (TLS 1.2 and up, client
	// certificates optional) and the agent API (mutual TLS).
	clientLeaf, err := n.ca.Issue(pki.LeafRequest{CommonName: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := clientLeaf.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	served := func(port int) (*big.Int, error) {
		d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 30 * time.Second}, Config: &tls.Config{
			RootCAs: n.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12,
		}}
		c, err := d.DialContext(t.Context(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber, nil
	}
	paths := pki.PathsIn(n.dir.pkiDir(), "node")
	wantServed := func(what string, want *pki.Leaf) {
		t.Helper()
		cert, err := pki.ParseCertificate(want.CertPEM)
		if err != nil {
			t.Fatal(err)
		}
		for _, port := range []int{o.APIPort, o.AgentPort} {
			// The agent API may still be starting on the first call.
			polltest.UntilErr(t, 30*time.Second, fmt.Sprintf("a handshake with port %d", port), func() error {
				_, err := served(port)
				return err
			})
			got, err := served(port)
			if err != nil {
				t.Fatalf("%s: handshake with port %d: %v", what, port, err)
			}
			if got.Cmp(cert.SerialNumber) != 0 {
				t.Fatalf("%s: port %d presented serial %s, want %s", what, port, got, cert.SerialNumber)
			}
		}
	}
	wantServed("the certificate of init", n.leaf)
	renewed, err := n.ca.Issue(nodeLeafRequest(n.state.NodeName, n.state.AdvertiseAddress))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, paths.Key, string(renewed.KeyPEM))
	writeAtomic(t, paths.Cert, string(renewed.CertPEM))
	wantServed("the renewed certificate", renewed)
	writeAtomic(t, paths.Cert, "garbage\n")
	wantServed("the last good certificate, the file garbage", renewed)
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	if err := pki.WriteFileAtomic(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
