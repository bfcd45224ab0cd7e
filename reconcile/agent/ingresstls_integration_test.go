package agent

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// leaderCerts answers certificates as the leader's API does: from the
// sealed records in etcd, opened with the cluster CA.
type leaderCerts struct {
	repo    *resources.Repo
	ca      *pki.CA
	fetches atomic.Int64
}

func (s *leaderCerts) IngressCertificate(ctx context.Context, kind, name string) (*api.IngressCertificateBundle, error) {
	s.fetches.Add(1)
	c, err := s.repo.GetIngressCertificate(ctx, kind, name)
	if err != nil {
		return nil, err
	}
	der, err := s.ca.Open(api.IngressCertificateSealPurpose(kind, name), c.SealedKey)
	if err != nil {
		return nil, err
	}
	return &api.IngressCertificateBundle{Kind: kind, Name: name, Fingerprint: c.Fingerprint, ChainPEM: c.ChainPEM,
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}, nil
}

// TestIngressUpdaterServesTLS runs the agent's updater against a real etcd
// and a real haproxy on loopback: a route whose rule names a certificate
// is served over HTTPS by SNI with that certificate (verified against its
// CA), its plain HTTP requests are redirected, an ACME challenge record is
// answered over HTTP and reported in the status, a restarted haproxy gets
// the certificate again from the agent's memory (no new fetch), and the
// key never reaches the agent's log or status.
func TestIngressUpdaterServesTLS(t *testing.T) {
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	var source *leaderCerts
	f := newIngressFixtureWith(t, true, func(cfg *AgentConfig) {
		source = &leaderCerts{repo: cfg.Repo, ca: ca}
		cfg.IngressCertificates, cfg.Logger = source, zerolog.New(&logs)
	})
	repo, u, port, httpsPort := f.repo, f.u, f.port, f.httpsPort

	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "a.test", DNSNames: []string{"a.test"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := pem.Decode(leaf.KeyPEM)
	cb, _ := pem.Decode(leaf.CertPEM)
	sum := sha256.Sum256(cb.Bytes)
	fp := hex.EncodeToString(sum[:])
	sealed, err := ca.Seal(api.IngressCertificateSealPurpose(api.CertificateFile, "a"), kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.PutIngressCertificate(context.Background(), api.IngressCertificate{Kind: api.CertificateFile, Name: "a",
		Hosts: []string{"a.test"}, ChainPEM: leaf.CertPEM, SealedKey: sealed, Fingerprint: fp}); err != nil {
		t.Fatal(err)
	}

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "web "+r.Header.Get("X-Forwarded-Proto"))
	}))
	defer web.Close()
	routes := api.IngressRoutes{Namespace: "d", Workload: "web", Rules: []api.IngressRule{{
		Host: "a.test", Path: "/", PortName: "http", Port: 80, TLS: true, TLSCertificate: "a", Certificate: fp,
		Backends: []api.IngressBackend{{InstanceID: "web-1", Addr: netip.MustParseAddrPort(strings.TrimPrefix(web.URL, "http://"))}},
	}}}
	if _, err := repo.WriteIngressRoutes(context.Background(), []api.IngressRoutes{routes}, nil); err != nil {
		t.Fatal(err)
	}
	if err := repo.PutACMEChallenge(context.Background(), api.ACMEChallenge{Token: "tok-A_1", KeyAuthorization: "tok-A_1.thumb",
		Host: "a.test", Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	httpsGet := func() string {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: "a.test", RootCAs: ca.Pool()}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/", httpsPort), nil)
		req.Host = "a.test"
		resp, err := (&http.Client{Transport: tr, Timeout: 3 * time.Second}).Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	httpGet := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
		req.Host = "a.test"
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 3 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Location") + strings.TrimSpace(string(b))
	}
	polltest.Until(t, 10*time.Second, "a.test served over HTTPS with its certificate", func() bool { return httpsGet() == "200 web https" })
	if code, loc := httpGet("/x"); code != http.StatusPermanentRedirect || loc != "https://a.test/x" {
		t.Errorf("http a.test/x = %d %q, want 308 to https://a.test/x", code, loc)
	}
	polltest.Until(t, 10*time.Second, "the challenge answered over HTTP and reported", func() bool {
		code, body := httpGet("/.well-known/acme-challenge/tok-A_1")
		st := u.Status()
		return code == http.StatusOK && body == "tok-A_1.thumb" && st != nil && st.ACMETokens == "tok-A_1" && st.Certificates == 1
	})

	fetches := source.fetches.Load()
	f.stop()
	f.stop = f.startHAProxy()
	polltest.Until(t, 10*time.Second, "a restarted haproxy serves a.test over HTTPS again", func() bool { return httpsGet() == "200 web https" })
	if n := source.fetches.Load(); n != fetches {
		t.Errorf("a restarted haproxy made the agent fetch the certificate again (%d fetches, was %d)", n, fetches)
	}

	// A rule without its certificate: the host goes back to plain HTTP.
	routes.Rules[0].Certificate = ""
	if _, err := repo.WriteIngressRoutes(context.Background(), []api.IngressRoutes{routes}, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a.test served over plain HTTP without a redirect", func() bool {
		code, body := httpGet("/")
		return code == http.StatusOK && body == "web http"
	})
	st := fmt.Sprintf("%+v", u.Status())
	for _, secret := range []string{base64.StdEncoding.EncodeToString(kb.Bytes)[20:60], strings.Split(string(leaf.KeyPEM), "\n")[1]} {
		if strings.Contains(logs.String(), secret) || strings.Contains(st, secret) {
			t.Errorf("key material in the agent's log or status")
		}
	}
	if logs.String() == "" {
		t.Error("the agent logged nothing: the log check checked nothing")
	}
}
