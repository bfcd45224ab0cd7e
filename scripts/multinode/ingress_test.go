package multinode

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
)

// ingressGet sends GET path with the Host header host to addr:80 from
// inside host h (a client, not a node), on a connection of its own, and
// returns the status code and the body.
func ingressGet(h harness.Host, addr netip.Addr, host, path string) (int, string, error) {
	var conn net.Conn
	err := h.InNetns(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", netip.AddrPortFrom(addr, 80).String(), 2*time.Second)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return 0, "", err
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}

// applyIngressWeb applies a Service serving its instance's hostname on
// 8080 (with a health check), on node, with the ingress rules "host path"
// or "host path CERT" (tls with the certificate pair CERT from files, or
// from ACME when CERT is "acme").
func (c *testCluster) applyIngressWeb(t *testing.T, name string, replicas int, node string, rules ...string) {
	t.Helper()
	vlb := webVLB + "  ingress:\n"
	for _, r := range rules {
		host, rest, _ := strings.Cut(r, " ")
		path, cert, _ := strings.Cut(rest, " ")
		tls := ""
		switch cert {
		case "":
		case "acme":
			tls = ", tls: true"
		default:
			tls = ", tls: true, tlsCertificate: " + cert
		}
		vlb += fmt.Sprintf("    - {host: %s, path: %q, servicePortName: http%s}\n", host, path, tls)
	}
	cmd := fmt.Sprintf("mkdir -p /www/api && echo %s-$(hostname) > /www/index.html && echo api-%s > /www/api/index.html && exec httpd -f -p 8080 -h /www", name, name)
	c.applyFiles(t, name, map[string]string{"workload.kat": webWorkload(name, replicas, node, cmd), "VirtualLoadBalancer.kat": vlb})
}

// TestIngress proves the ingress end to end: examples-repo's proxy runs on
// the two ingress nodes only; a client outside the cluster's nodes reaches
// two hosts by Host header, routed over the overlay to workloads on a third
// node, through either ingress node; a path prefix routes apart from its
// host; an unknown host gets 404; a second workload claiming a held host
// and path is not routed and shows a conflict naming the holder; a host
// with a certificate from files is served over HTTPS by SNI through both
// ingress nodes, verified against its CA, its HTTP redirected, and the key
// is nowhere in the agents' logs or katcall's output; deleting a workload
// removes its routes from both proxies, and the waiting claimant takes
// them.
func TestIngress(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	acme := newPebbleSpec(t)
	c := startCluster(t, clusterSpec{name: "ing", hosts: 4, start: 3, ingress: []int{1, 2}, args: acme.agentArgs})
	node1, client := c.Hosts[0], c.Hosts[3]
	acme.start(t, client, c.Hosts[1])
	ingress := []harness.Host{c.Hosts[1], c.Hosts[2]}
	// The certificate of s.test, in the leader's ingress certificate
	// directory (--ingress-cert-dir's default).
	testCA, err := pki.NewCA("ingress test CA")
	if err != nil {
		t.Fatal(err)
	}
	stest, err := testCA.Issue(pki.LeafRequest{CommonName: "s.test", DNSNames: []string{"s.test"}, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	certDir := filepath.Join(node1.DataDir, "ingress", "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"stest.key": stest.KeyPEM, "stest.crt": stest.CertPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	c.katcall(t, "apply", "-f", filepath.Join(e2e.RepoRoot(), "examples-repo", "kat-core"))
	c.applyIngressWeb(t, "web-a", 2, node1.Name, "a.test /")
	c.applyIngressWeb(t, "web-b", 1, node1.Name, "b.test /", "b.test /api", "s.test / stest", "t.test / acme")
	c.waitRunning(t, 2*time.Minute, "ingress", "the proxy on the two ingress nodes only", equal(0, 1, 1, 0))

	// expect polls every ingress node from the client until host+path
	// answers code with a body starting with prefix.
	expect := func(t *testing.T, host, path string, code int, prefix string) {
		t.Helper()
		for _, in := range ingress {
			polltest.UntilErr(t, time.Minute, fmt.Sprintf("%s%s through %s answers %d %s...", host, path, in.Name, code, prefix), func() error {
				got, body, err := ingressGet(client, in.Addr, host, path)
				if err == nil && (got != code || !strings.HasPrefix(body, prefix)) {
					err = fmt.Errorf("got %d %q", got, body)
				}
				return err
			})
		}
	}
	expect(t, "a.test", "/", 200, "web-a-")
	expect(t, "b.test", "/", 200, "web-b-")
	t.Logf("apply of the proxy and two workloads -> both hosts answer through both ingress nodes: %s", time.Since(start).Round(time.Millisecond))
	expect(t, "b.test", "/api/", 200, "api-web-b")
	expect(t, "B.Test:80", "/", 200, "web-b-")
	expect(t, "c.test", "/", 404, "no ingress route")

	t.Run("katcall status shows both proxies and what they route", func(t *testing.T) {
		polltest.UntilErr(t, 30*time.Second, "status lists node2 and node3 as ingress nodes with 5 routes", func() error {
			out, err := c.Katcall(t.Context(), c.bin.Katcall, "status")
			if err != nil {
				return err
			}
			for _, in := range ingress {
				if !strings.Contains(out, "INGRESS NODE") || !regexp.MustCompile(in.Name+` +HAProxy +5 +3 `).MatchString(out) {
					return fmt.Errorf("status:\n%s", out)
				}
			}
			return nil
		})
	})

	t.Run("requests spread over both instances", func(t *testing.T) {
		seen := map[string]bool{}
		for range 8 {
			code, body, err := ingressGet(client, ingress[0].Addr, "a.test", "/")
			if err != nil || code != 200 {
				t.Fatalf("a.test: %d %q %v", code, body, err)
			}
			seen[body] = true
		}
		if len(seen) != 2 {
			t.Errorf("8 requests to a.test answered by %v, want web-a's 2 instances", seen)
		}
	})

	t.Run("HTTPS by SNI with a certificate from files; HTTP redirected; the key nowhere", func(t *testing.T) {
		testHTTPSFromFiles(t, c, client, ingress, testCA, stest)
	})

	t.Run("HTTPS with a certificate from ACME (Pebble), issued and renewed", func(t *testing.T) {
		acme.check(t, client, ingress, start)
	})

	t.Run("a second claimant of a held host waits, named in get ingress", func(t *testing.T) {
		c.applyIngressWeb(t, "web-c", 1, node1.Name, "a.test /")
		polltest.UntilErr(t, time.Minute, "get ingress shows web-c's conflict with web-a", func() error {
			out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "ingress")
			if err == nil && !strings.Contains(out, "Conflict: default/web-a") {
				err = fmt.Errorf("get ingress:\n%s", out)
			}
			return err
		})
		expect(t, "a.test", "/", 200, "web-a-")
	})

	t.Run("deleting a workload removes its routes; the waiting claimant takes them", func(t *testing.T) {
		deleted := time.Now()
		c.katcall(t, "delete", "workload", "default/web-b")
		expect(t, "b.test", "/", 404, "no ingress route")
		expect(t, "b.test", "/api", 404, "no ingress route")
		t.Logf("delete of web-b -> b.test answers 404 on both ingress nodes: %s", time.Since(deleted).Round(time.Millisecond))
		c.katcall(t, "delete", "workload", "default/web-a")
		expect(t, "a.test", "/", 200, "web-c-")
	})
}
