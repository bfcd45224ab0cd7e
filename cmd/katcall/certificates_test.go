package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
)

// TestGetAndDeleteCertificates: katcall get certificates lists each
// certificate's source, hosts, expiry, the routes using it and its error,
// and never a key; delete certificate refuses a malformed reference and a
// certificate in use without --force, and deletes otherwise.
func TestGetAndDeleteCertificates(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	leaf, err := c.ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(leaf.KeyPEM)
	sealed, err := c.ca.Seal(api.IngressCertificateSealPurpose(api.CertificateFile, "shop"), block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Date(2027, 2, 1, 12, 30, 0, 0, time.UTC)
	for _, rec := range []api.IngressCertificate{
		{Kind: api.CertificateFile, Name: "shop", Hosts: []string{"shop.test"}, ChainPEM: leaf.CertPEM, SealedKey: sealed, Fingerprint: "fp1", NotAfter: notAfter},
		{Kind: api.CertificateACME, Name: "old.test", LastError: "validate old.test: connection refused", UnroutedSince: time.Now().Add(-2 * time.Hour)},
	} {
		if err := c.repo.PutIngressCertificate(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.repo.WriteIngressRoutes(ctx, []api.IngressRoutes{{Namespace: "default", Workload: "shop", Rules: []api.IngressRule{
		{Host: "shop.test", Path: "/", Port: 80, TLS: true, TLSCertificate: "shop", Certificate: "fp1"},
	}}}, nil); err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) (string, int) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(ctx, append([]string{"--config", c.config}, args...), &stdout, &stderr)
		return stdout.String() + stderr.String(), code
	}
	table, code := call("get", "certificates")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("get certificates: %d\n%s", code, table)
	}
	for i, want := range [][]string{
		{"CERTIFICATE", "HOSTS", "EXPIRES", "ROUTES", "ERROR"},
		{"acme/old.test", "-", "-", "none since 2h ago", "validate old.test: connection refused"},
		{"file/shop", "shop.test", "2027-02-01 12:30", "shop.test/ default/shop", "-"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("get certificates line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	js, _ := call("get", "cert", "file/shop", "-o", "json")
	for _, s := range []string{string(block.Bytes), "PRIVATE", "BEGIN CERTIFICATE", "sealed", strings.Split(string(leaf.KeyPEM), "\n")[1]} {
		if strings.Contains(table+js, s) {
			t.Errorf("get certificates shows key or chain material (%.12q)", s)
		}
	}
	if !strings.Contains(js, `"fingerprint": "fp1"`) {
		t.Errorf("get cert file/shop -o json:\n%s", js)
	}
	if out, code := call("delete", "certificate", "shop"); code == 0 || !strings.Contains(out, "want KIND/NAME") {
		t.Errorf("delete certificate shop: %d %s", code, out)
	}
	if out, code := call("delete", "certificate", "file/shop"); code == 0 || !strings.Contains(out, "--force") {
		t.Errorf("delete a used certificate: %d %s", code, out)
	}
	if out, code := call("delete", "certificate", "file/shop", "--force"); code != 0 || !strings.Contains(out, "certificate file/shop deleted") {
		t.Errorf("delete --force: %d %s", code, out)
	}
	if out, code := call("delete", "cert", "acme/old.test"); code != 0 {
		t.Errorf("delete acme/old.test: %d %s", code, out)
	}
	if left, _ := c.repo.ListIngressCertificates(ctx); len(left) != 0 {
		t.Errorf("%d certificates left", len(left))
	}
}
