package multinode

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/scripts/harness"
)

// ingressRequest sends GET path with the Host header (and SNI) host to
// addr:port from inside host h on a connection of its own, over TLS
// trusting roots when roots is set, and returns the response with its
// body read, and the leaf certificate served.
func ingressRequest(h harness.Host, addr netip.Addr, port uint16, host, path string, roots *x509.CertPool) (ingressAnswer, error) {
	var conn net.Conn
	err := h.InNetns(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(addr, port).String(), 2*time.Second)
		return err
	})
	if err != nil {
		return ingressAnswer{}, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return ingressAnswer{}, err
	}
	var leaf *x509.Certificate
	if roots != nil {
		tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err := tc.Handshake(); err != nil {
			return ingressAnswer{}, err
		}
		leaf = tc.ConnectionState().PeerCertificates[0]
		conn = tc
	}
	// Pebble refuses a request without a User-Agent.
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: kat-multinode\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return ingressAnswer{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return ingressAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return ingressAnswer{Code: resp.StatusCode, Header: resp.Header, Body: strings.TrimSpace(string(b)), Leaf: leaf}, err
}

// ingressAnswer is what ingressRequest read: the status, the header, the
// body without surrounding space and, over TLS, the certificate served.
type ingressAnswer struct {
	Code   int
	Header http.Header
	Body   string
	Leaf   *x509.Certificate
}

// testHTTPSFromFiles checks s.test, routed to web-b with the certificate
// pair stest (leaf, signed by ca) from the leader's certificate directory:
// served over HTTPS by SNI through every ingress node, its plain HTTP
// redirected (308), its expiry in katcall get ingress, and its key in no
// agent's log and no katcall output.
func testHTTPSFromFiles(t *testing.T, c *testCluster, client harness.Host, ingress []harness.Host, ca *pki.CA, leaf *pki.Leaf) {
	t.Helper()
	block, _ := pem.Decode(leaf.CertPEM)
	want, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, in := range ingress {
		polltest.UntilErr(t, 2*time.Minute, "s.test over HTTPS through "+in.Name+" with its certificate", func() error {
			a, err := ingressRequest(client, in.Addr, 443, "s.test", "/", ca.Pool())
			switch {
			case err != nil:
				return err
			case a.Code != http.StatusOK || !strings.HasPrefix(a.Body, "web-b-"):
				return fmt.Errorf("got %d %q", a.Code, a.Body)
			case a.Leaf.SerialNumber.Cmp(want.SerialNumber) != 0:
				return fmt.Errorf("served serial %s, want %s", a.Leaf.SerialNumber, want.SerialNumber)
			}
			return nil
		})
		a, err := ingressRequest(client, in.Addr, 80, "s.test", "/x?y=1", nil)
		if err != nil || a.Code != http.StatusPermanentRedirect || a.Header.Get("Location") != "https://s.test/x?y=1" {
			t.Errorf("http s.test/x?y=1 through %s: %d %v %v; want 308 to https://s.test/x?y=1", in.Name, a.Code, a.Header, err)
		}
		if code, body, err := ingressGet(client, in.Addr, "b.test", "/"); err != nil || code != 200 || !strings.HasPrefix(body, "web-b-") {
			t.Errorf("http b.test (no tls) through %s: %d %q %v; want 200 without a redirect", in.Name, code, body, err)
		}
	}
	t.Logf("s.test served over HTTPS with its certificate from files through both ingress nodes %s after HTTP worked",
		time.Since(start).Round(time.Millisecond))
	polltest.UntilErr(t, 30*time.Second, "get ingress shows s.test's certificate and expiry", func() error {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "ingress", "s.test")
		if err == nil && (!strings.Contains(out, "file:stest") || !strings.Contains(out, want.NotAfter.UTC().Format("2006-01-02"))) {
			err = fmt.Errorf("get ingress s.test:\n%s", out)
		}
		return err
	})
	polltest.UntilErr(t, 30*time.Second, "get certificates shows stest, its expiry and the route using it", func() error {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "certificates", "file/stest")
		if err == nil && !regexp.MustCompile(`file/stest +s\.test +`+want.NotAfter.UTC().Format("2006-01-02")+` [0-9:]+ +s\.test/ default/web-b +-`).MatchString(out) {
			err = fmt.Errorf("get certificates file/stest:\n%s", out)
		}
		return err
	})

	// The key is nowhere: the agents' logs, katcall's output.
	kb, _ := pem.Decode(leaf.KeyPEM)
	secrets := []string{strings.Split(string(leaf.KeyPEM), "\n")[1], base64.StdEncoding.EncodeToString(kb.Bytes)[16:64]}
	places := map[string]string{}
	for _, h := range c.Hosts {
		b, err := os.ReadFile(h.AgentLog())
		if err == nil {
			places[h.Name+"'s kat-agent log"] = string(b)
		}
	}
	for _, args := range [][]string{{"get", "ingress", "-o", "json"}, {"get", "certificates", "-o", "json"}, {"status", "-o", "json"}, {"get", "events"}, {"get", "audit", "-o", "json"}, {"get", "nodes", "-o", "json"}} {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, args...)
		if err != nil {
			t.Errorf("katcall %s: %v", strings.Join(args, " "), err)
		}
		places["katcall "+strings.Join(args, " ")] = out
	}
	for where, text := range places {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("s.test's private key is in %s", where)
			}
		}
	}
	t.Logf("s.test's key searched for in %d places (agent logs, katcall output): not found", len(places))
}

// pebbleSpec runs Pebble, a local ACME CA, in the client host for
// TestIngress: the leader (node1) reaches it with --acme-directory, and its
// DNS (pebble-challtestsrv) resolves every name to the first ingress node,
// whose proxy answers the HTTP-01 challenges on port 80. Certificates are
// valid 20 s, so one is renewed during the test.
type pebbleSpec struct {
	t             *testing.T
	pebble, chall string // "" when not installed
	dir           string
	listener      *pki.CA
	directory     string
}

// pebbleValidity is the lifetime of Pebble's certificates, in seconds.
const pebbleValidity = 20

func newPebbleSpec(t *testing.T) *pebbleSpec {
	t.Helper()
	p := &pebbleSpec{t: t, dir: t.TempDir(), pebble: goBin("pebble"), chall: goBin("pebble-challtestsrv")}
	if (p.pebble == "" || p.chall == "") && os.Getenv(testenv.RequirePrereqsEnv) != "" {
		t.Fatalf("pebble is not installed and %s is set (scripts/install-prereqs.sh installs it)", testenv.RequirePrereqsEnv)
	}
	return p
}

// goBin finds a program on PATH or in Go's bin directory; "" if absent.
func goBin(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return ""
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, dir := range []string{f[0], filepath.Join(f[len(f)-1], "bin")} {
		if _, err := os.Stat(filepath.Join(dir, name)); dir != "" && err == nil {
			return filepath.Join(dir, name)
		}
	}
	return ""
}

// agentArgs points node1 (the leader) at Pebble in the last host.
func (p *pebbleSpec) agentArgs(hosts []harness.Host) map[string][]string {
	if p.pebble == "" {
		return nil
	}
	t, client := p.t, hosts[len(hosts)-1]
	var err error
	if p.listener, err = pki.NewCA("pebble listener CA"); err != nil {
		t.Fatal(err)
	}
	leaf, err := p.listener.Issue(pki.LeafRequest{CommonName: "pebble", IPs: []net.IP{client.Addr.AsSlice()}})
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"cert.pem": leaf.CertPEM, "key.pem": leaf.KeyPEM, "ca.pem": p.listener.CertPEM} {
		if err := os.WriteFile(filepath.Join(p.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p.directory = "https://" + netip.AddrPortFrom(client.Addr, 14000).String() + "/dir"
	return map[string][]string{hosts[0].Name: {"--acme-directory", p.directory, "--acme-ca-file", filepath.Join(p.dir, "ca.pem")}}
}

// start runs challtestsrv and Pebble in client until the test ends.
func (p *pebbleSpec) start(t *testing.T, client, validator harness.Host) {
	t.Helper()
	if p.pebble == "" {
		return
	}
	at := func(port uint16) string { return netip.AddrPortFrom(client.Addr, port).String() }
	cfg := fmt.Sprintf(`{"pebble": {"listenAddress": %q, "managementListenAddress": %q, "certificate": %q, "privateKey": %q,
		"httpPort": 80, "tlsPort": 443, "ocspResponderURL": "", "externalAccountBindingRequired": false,
		"retryAfter": {"authz": 1, "order": 1}, "keyAlgorithm": "ecdsa",
		"profiles": {"default": {"description": "short", "validityPeriod": %d}}}}`,
		at(14000), at(15000), filepath.Join(p.dir, "cert.pem"), filepath.Join(p.dir, "key.pem"), pebbleValidity)
	if err := os.WriteFile(filepath.Join(p.dir, "pebble.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, bin string, args ...string) {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := client.Command(ctx, bin, args...)
		cmd.Env = append(cmd.Env, env...)
		var out testenv.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start %s in %s: %v", filepath.Base(bin), client.Name, err)
		}
		t.Cleanup(func() {
			cancel()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", filepath.Base(bin), out.String())
			}
		})
	}
	run(nil, p.chall, "-defaultIPv4", validator.Addr.String(), "-defaultIPv6", "", "-dnsserver", at(8053),
		"-management", at(8055), "-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "")
	run([]string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0"}, p.pebble,
		"-config", filepath.Join(p.dir, "pebble.json"), "-dnsserver", at(8053))
	polltest.UntilErr(t, 30*time.Second, "pebble serves its directory", func() error {
		a, err := ingressRequest(client, client.Addr, 14000, client.Addr.String(), "/dir", p.listener.Pool())
		if err == nil && a.Code != http.StatusOK {
			err = fmt.Errorf("GET /dir: %d", a.Code)
		}
		return err
	})
}

// check waits for t.test (tls from ACME, applied at applied) to be served
// through every ingress node with a certificate Pebble's root verifies,
// then for its renewal.
func (p *pebbleSpec) check(t *testing.T, client harness.Host, ingress []harness.Host, applied time.Time) {
	t.Helper()
	if p.pebble == "" {
		t.Skip("pebble is not installed (scripts/install-prereqs.sh installs it)")
	}
	a, err := ingressRequest(client, client.Addr, 15000, client.Addr.String(), "/roots/0", p.listener.Pool())
	if err != nil || a.Code != http.StatusOK {
		t.Fatalf("pebble's root: %d %v", a.Code, err)
	}
	root := x509.NewCertPool()
	if !root.AppendCertsFromPEM([]byte(a.Body)) {
		t.Fatalf("pebble's root: %q", a.Body)
	}
	serve := func(in harness.Host) (*x509.Certificate, error) {
		a, err := ingressRequest(client, in.Addr, 443, "t.test", "/", root)
		if err == nil && (a.Code != http.StatusOK || !strings.HasPrefix(a.Body, "web-b-")) {
			err = fmt.Errorf("got %d %q", a.Code, a.Body)
		}
		return a.Leaf, err
	}
	var first *x509.Certificate
	for _, in := range ingress {
		polltest.UntilErr(t, 2*time.Minute, "t.test over HTTPS through "+in.Name+" with a certificate from Pebble", func() error {
			leaf, err := serve(in)
			if err == nil && first == nil {
				first = leaf
			}
			return err
		})
	}
	t.Logf("ACME: apply -> t.test served over HTTPS with Pebble's certificate through both ingress nodes: %s (valid %s)",
		time.Since(applied).Round(time.Millisecond), first.NotAfter.Sub(first.NotBefore))
	if a, err := ingressRequest(client, ingress[0].Addr, 80, "t.test", "/", nil); err != nil || a.Code != http.StatusPermanentRedirect {
		t.Errorf("http t.test: %d %v; want 308", a.Code, err)
	}
	for _, in := range ingress {
		polltest.UntilErr(t, 2*time.Minute, "t.test's certificate renewed through "+in.Name, func() error {
			leaf, err := serve(in)
			if err == nil && leaf.SerialNumber.Cmp(first.SerialNumber) == 0 {
				err = fmt.Errorf("still serial %s", leaf.SerialNumber)
			}
			return err
		})
	}
	renewAt := first.NotBefore.Add(first.NotAfter.Sub(first.NotBefore) * 2 / 3)
	t.Logf("ACME: t.test's renewal (due %s after issue) served through both ingress nodes %s after due",
		renewAt.Sub(first.NotBefore).Round(time.Second), time.Since(renewAt).Round(time.Millisecond))
}
