package leader

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
)

// pebbleInstall is how the ACME test's prerequisites are installed
// (scripts/install-prereqs.sh runs it).
const pebbleInstall = "go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.10.3 github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@v2.10.3"

// lookGoBin finds a program on PATH or in Go's bin directory.
func lookGoBin(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err == nil {
		f := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, dir := range []string{f[0], filepath.Join(f[len(f)-1], "bin")} {
			if p := filepath.Join(dir, name); dir != "" && fileExists(p) {
				return p
			}
		}
	}
	testenv.SkipOrFail(t, "%s is not installed (scripts/install-prereqs.sh runs: %s)", name, pebbleInstall)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freeLoopbackPort(t *testing.T, network string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pebble is a Pebble ACME server on loopback with challtestsrv as its DNS
// (every name resolves to 127.0.0.1), validating HTTP-01 on httpPort.
type pebble struct {
	directory string
	client    *http.Client
	mgmt      string
}

// startPebble runs Pebble with certificates valid validity seconds;
// blocked is refused.
func startPebble(t *testing.T, httpPort, validity int, blocked string) *pebble {
	t.Helper()
	pebbleBin, challBin := lookGoBin(t, "pebble"), lookGoBin(t, "pebble-challtestsrv")
	dir := t.TempDir()
	ca, err := pki.NewCA("pebble listener CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "localhost", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"cert.pem": leaf.CertPEM, "key.pem": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dnsPort := freeLoopbackPort(t, "udp")
	listen, mgmt := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t, "tcp")), fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t, "tcp"))
	cfg, _ := json.Marshal(map[string]any{"pebble": map[string]any{
		"listenAddress": listen, "managementListenAddress": mgmt,
		"certificate": filepath.Join(dir, "cert.pem"), "privateKey": filepath.Join(dir, "key.pem"),
		"httpPort": httpPort, "tlsPort": freeLoopbackPort(t, "tcp"), "ocspResponderURL": "",
		"externalAccountBindingRequired": false, "domainBlocklist": []string{blocked},
		"retryAfter": map[string]int{"authz": 1, "order": 1}, "keyAlgorithm": "ecdsa",
		"profiles": map[string]any{"default": map[string]any{"description": "short", "validityPeriod": validity}},
	}})
	if err := os.WriteFile(filepath.Join(dir, "pebble.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(bin string, env []string, args ...string) {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var out testenv.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s: %v", bin, err)
		}
		t.Cleanup(func() {
			cancel()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", filepath.Base(bin), out.String())
			}
		})
	}
	start(challBin, nil, "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "", "-dnsserver", fmt.Sprintf("127.0.0.1:%d", dnsPort),
		"-management", fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t, "tcp")), "-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "")
	start(pebbleBin, []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"},
		"-config", filepath.Join(dir, "pebble.json"), "-dnsserver", fmt.Sprintf("127.0.0.1:%d", dnsPort))
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	p := &pebble{directory: "https://" + listen + "/dir", client: &http.Client{Transport: tr, Timeout: 10 * time.Second}, mgmt: "https://" + mgmt}
	polltest.Until(t, 20*time.Second, "pebble serves its directory", func() bool {
		resp, err := p.client.Get(p.directory)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// root is Pebble's current root certificate.
func (p *pebble) root(t *testing.T) *x509.CertPool {
	t.Helper()
	resp, err := p.client.Get(p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("pebble's root: %s", b)
	}
	return pool
}

// challengeAnswerer stands for the ingress proxies (the agent's updater
// and HAProxy, tested with each other in reconcile/agent): it answers the
// published HTTP-01 challenges on 127.0.0.1:port and reports the tokens it
// answers in node n1's status, as a proxy's agent does.
func (e *leaderEnv) challengeAnswerer(port int) {
	e.t.Helper()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		e.t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.URL.Path, "/.well-known/acme-challenge/")
		cs, err := e.repo.ListACMEChallenges(r.Context())
		if !ok || err != nil {
			http.NotFound(w, r)
			return
		}
		for _, c := range cs {
			if c.Token == token && c.Host == strings.Split(r.Host, ":")[0] {
				fmt.Fprint(w, c.KeyAuthorization)
				return
			}
		}
		http.NotFound(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := "-"
		for ctx.Err() == nil {
			cs, err := e.repo.ListACMEChallenges(ctx)
			if err == nil {
				var tokens []string
				for _, c := range cs {
					tokens = append(tokens, c.Token)
				}
				slices.Sort(tokens)
				if now := strings.Join(tokens, " "); now != last {
					st := api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), Ingress: &api.IngressProxyStatus{Proxy: "HAProxy", ACMETokens: now}}
					st.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
					if e.repo.PutNodeStatus(ctx, st) == nil {
						last = now
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	e.t.Cleanup(func() {
		cancel()
		<-done
		_ = srv.Close()
	})
}

// TestLeaderACMEWithPebble runs the ACME loop against a real Pebble: a
// host with tls and no tlsCertificate gets a certificate that verifies
// against Pebble's root and is named in its route; it is renewed at two
// thirds of its 15 s lifetime, in a new leader term that reuses the
// stored account; a host the CA refuses backs off with the reason in its
// record; no key reaches etcd in the clear or the log.
func TestLeaderACMEWithPebble(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	httpPort := freeLoopbackPort(t, "tcp")
	p := startPebble(t, httpPort, 15, "blocked.test")
	e.challengeAnswerer(httpPort)
	sealer, err := pki.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	cfg := Config{Sealer: sealer, Logger: zerolog.New(&logs), ACME: ACMEConfig{
		Directory: p.directory, HTTPClient: p.client, Email: "ops@example.com", ChallengeWait: 10 * time.Second,
		RetryBase: 200 * time.Millisecond, RetryMax: 2 * time.Second,
	}}
	e.apply(tlsIngressFiles(t, "web", "a.test", ""), api.APIOwner())
	e.apply(tlsIngressFiles(t, "bad", "blocked.test", ""), api.APIOwner())
	start := time.Now()
	_, stop := e.run(cfg)
	stored := func(host string) api.IngressCertificate {
		c, err := e.repo.GetIngressCertificate(e.ctx, api.CertificateACME, host)
		if err != nil {
			return api.IngressCertificate{}
		}
		return *c
	}
	ruleCert := func() string {
		recs, _ := e.repo.ListIngressRoutes(e.ctx)
		for _, r := range recs {
			if r.Workload == "web" && len(r.Rules) == 1 {
				return r.Rules[0].Certificate
			}
		}
		return ""
	}
	polltest.Until(t, 30*time.Second, "a.test's certificate issued and named in its route", func() bool {
		fp := stored("a.test").Fingerprint
		return fp != "" && ruleCert() == fp
	})
	issued := stored("a.test")
	t.Logf("ACME: leader start -> a.test's certificate issued and routed: %s (lifetime %s, renew at %s)",
		time.Since(start).Round(time.Millisecond), issued.NotAfter.Sub(issued.NotBefore), issued.RenewAt.Sub(issued.NotBefore))
	verify := func(c api.IngressCertificate) {
		t.Helper()
		var chain []*x509.Certificate
		for rest := c.ChainPEM; ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			cert, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			chain = append(chain, cert)
		}
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: "a.test", Roots: p.root(t), Intermediates: inter, CurrentTime: chain[0].NotBefore.Add(time.Second)}); err != nil {
			t.Errorf("a.test's certificate does not verify against pebble's root: %v", err)
		}
	}
	verify(issued)
	if want := issued.NotBefore.Add(issued.NotAfter.Sub(issued.NotBefore) * 2 / 3); !issued.RenewAt.Equal(want) {
		t.Errorf("renew at %s, want two thirds of the lifetime, %s", issued.RenewAt, want)
	}
	acct, err := e.repo.GetACMEAccount(e.ctx)
	if err != nil || acct == nil || acct.URI == "" || acct.Directory != p.directory {
		t.Fatalf("account: %+v, %v", acct, err)
	}

	// A new term renews with the stored account.
	stop()
	_, stop = e.run(cfg)
	defer stop()
	polltest.Until(t, 40*time.Second, "a.test's certificate renewed and routed", func() bool {
		fp := stored("a.test").Fingerprint
		return fp != "" && fp != issued.Fingerprint && ruleCert() == fp
	})
	renewed := stored("a.test")
	t.Logf("ACME: renewal due -> renewed and routed: %s", time.Since(issued.RenewAt).Round(time.Millisecond))
	verify(renewed)
	if again, err := e.repo.GetACMEAccount(e.ctx); err != nil || again.URI != acct.URI || !bytes.Equal(again.SealedKey, acct.SealedKey) {
		t.Errorf("the new term registered another account: %+v, was %+v", again, acct)
	}

	// The refused host backs off, the reason in its record.
	polltest.Until(t, 20*time.Second, "blocked.test refused at least twice", func() bool { return stored("blocked.test").Failures >= 2 })
	bad := stored("blocked.test")
	if bad.Fingerprint != "" || !strings.Contains(bad.LastError, "blocked.test") || !bad.NextTryAt.After(bad.LastErrorAt) {
		t.Errorf("blocked.test: %+v; want no certificate, the CA's reason, a next try after the last error", bad)
	}
	t.Logf("blocked.test: %d failures, last %q, next try in %s", bad.Failures, bad.LastError, bad.NextTryAt.Sub(bad.LastErrorAt))

	stop()
	kv, err := e.repo.Store().List(e.ctx, "/kat/ingress/")
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, x := range kv {
		all.Write(x.Value)
	}
	for _, rec := range []api.IngressCertificate{issued, renewed} {
		der, err := sealer.Open(api.IngressCertificateSealPurpose(api.CertificateACME, "a.test"), rec.SealedKey)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{base64.StdEncoding.EncodeToString(der)[20:60], base64.RawURLEncoding.EncodeToString(der)[20:60], string(der[10:30])} {
			if strings.Contains(logs.String(), secret) || strings.Contains(all.String(), secret) {
				t.Errorf("a certificate key in the clear in etcd or the log")
			}
		}
	}
}

// TestACMEWaitsForEveryProxy: a node with a proxy instance assigned counts
// among those that must answer a challenge before it reports any proxy
// status, so the CA is not asked to validate while an ingress node it may
// ask cannot answer yet.
func TestACMEWaitsForEveryProxy(t *testing.T) {
	t.Parallel()
	e, _ := newTwoNodeEnv(t)
	files := workloadFiles(t, "proxy", quadlet.TypeDaemonService, 0, "true")
	files["workload.kat"] = bytes.Replace(files["workload.kat"], []byte("metadata:\n"), []byte("metadata:\n  labels: {kat.dws.rip/ingress-proxy: haproxy}\n"), 1)
	files["VirtualLoadBalancer.kat"] = []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: VirtualLoadBalancer\nspec:\n  ports: [{name: http, containerPort: 80}]\n")
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	e.apply(files, api.APIOwner())
	l, stop := e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "a proxy on n1 and n2", func() bool { return e.onNodes("proxy") == "n1:1 n2:1" })
	answers := func(node, tokens string) {
		st := api.NodeStatus{NodeName: node, Timestamp: time.Now().Unix(), Ingress: &api.IngressProxyStatus{Proxy: "HAProxy", ACMETokens: tokens}}
		st.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
		if err := e.repo.PutNodeStatus(e.ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	is := &acmeIssuer{l: l}
	answers("n1", "tok")
	polltest.Until(t, 10*time.Second, "n2, assigned a proxy and silent, not answering", func() bool {
		missing, proxies := is.notAnswering("tok")
		return proxies == 2 && slices.Equal(missing, []string{"n2"})
	})
	answers("n2", "other tok")
	polltest.Until(t, 10*time.Second, "both answering", func() bool {
		missing, proxies := is.notAnswering("tok")
		return proxies == 2 && len(missing) == 0
	})
}

// TestLeaderRemovesUnroutedACMECertificates: the ACME certificate of a host
// no rule routes any more is marked, kept for the grace period, then
// deleted with a CertificateRemoved event; a routed host's certificate
// loses an old mark and is kept. No CA is contacted (nothing is due).
func TestLeaderRemovesUnroutedACMECertificates(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	e.apply(tlsIngressFiles(t, "kept", "kept.test", ""), api.APIOwner())
	// A first term without ACME routes kept.test, as an earlier term
	// would have: the routes are in etcd when the ACME loop starts.
	_, stop := e.run(Config{})
	polltest.Until(t, 10*time.Second, "kept.test routed", func() bool {
		rs, _ := e.repo.ListIngressRoutes(e.ctx)
		return len(rs) == 1 && len(rs[0].Rules) == 1 && rs[0].Rules[0].Host == "kept.test"
	})
	stop()
	now := time.Now().UTC()
	for _, c := range []api.IngressCertificate{
		{Kind: api.CertificateACME, Name: "kept.test", Hosts: []string{"kept.test"}, Fingerprint: "fp-kept",
			NotBefore: now, NotAfter: now.Add(90 * 24 * time.Hour), RenewAt: now.Add(60 * 24 * time.Hour), UnroutedSince: now.Add(-time.Hour)},
		{Kind: api.CertificateACME, Name: "old.test", Hosts: []string{"old.test"}, Fingerprint: "fp-old",
			NotBefore: now, NotAfter: now.Add(90 * 24 * time.Hour), RenewAt: now.Add(60 * 24 * time.Hour)},
	} {
		if err := e.repo.PutIngressCertificate(e.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	const grace = time.Second
	_, stop = e.run(Config{Sealer: ca, ACME: ACMEConfig{Directory: "https://127.0.0.1:9/directory", UnroutedGrace: grace}})
	defer stop()
	get := func(host string) (api.IngressCertificate, bool) {
		c, err := e.repo.GetIngressCertificate(e.ctx, api.CertificateACME, host)
		if err != nil {
			return api.IngressCertificate{}, false
		}
		return *c, true
	}
	var marked time.Time
	polltest.Until(t, 10*time.Second, "old.test marked unrouted, or already deleted", func() bool {
		c, ok := get("old.test")
		marked = c.UnroutedSince
		return !ok || !marked.IsZero()
	})
	polltest.Until(t, 10*time.Second, "old.test deleted after the grace period", func() bool {
		_, ok := get("old.test")
		return !ok
	})
	if gone := time.Now(); !marked.IsZero() && gone.Before(marked.Add(grace)) {
		t.Errorf("old.test deleted at %s, before its grace ended (%s + %s)", gone, marked, grace)
	}
	polltest.Until(t, 10*time.Second, "the CertificateRemoved event", func() bool {
		evs, _ := e.repo.ListEvents(e.ctx, 0)
		for _, ev := range evs {
			if ev.Reason == api.ReasonCertificateRemoved && ev.Object == "certificate/acme/old.test" && strings.Contains(ev.Message, "old.test") {
				return true
			}
		}
		return false
	})
	kept, ok := get("kept.test")
	if !ok || kept.Fingerprint != "fp-kept" || !kept.UnroutedSince.IsZero() {
		t.Errorf("kept.test (routed): %+v, present %v; want kept with no unrouted mark", kept, ok)
	}
}
