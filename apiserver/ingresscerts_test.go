package apiserver_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/pki"
)

// proxyFiles is an ingress proxy workload (quadlet.LabelIngressProxy).
var proxyFiles = map[string][]byte{
	"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: ingress, namespace: kat-core, labels: {kat.dws.rip/ingress-proxy: haproxy}}
spec:
  type: DaemonService
  source: {image: "docker.io/library/haproxy:2.6"}
  restartPolicy: {condition: Always}
  container: {name: haproxy}
`),
	"VirtualLoadBalancer.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports: [{name: http, containerPort: 80}, {name: https, containerPort: 443}]
`),
}

// putShopCertificate stores the file certificate "shop" for shop.test
// (fingerprint fp1) with its key sealed by a new CA, and returns the CA,
// the leaf, the key's PEM block and the parsed certificate.
func putShopCertificate(t *testing.T, f *fixture) (*pki.CA, *pki.Leaf, *pem.Block, *x509.Certificate) {
	t.Helper()
	ca, err := pki.NewCA("ingress")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(leaf.KeyPEM)
	sealed, err := ca.Seal(api.IngressCertificateSealPurpose(api.CertificateFile, "shop"), block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := pem.Decode(leaf.CertPEM)
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.repo.PutIngressCertificate(context.Background(), api.IngressCertificate{Kind: api.CertificateFile, Name: "shop", Hosts: []string{"shop.test"},
		ChainPEM: leaf.CertPEM, SealedKey: sealed, Fingerprint: "fp1", NotBefore: cert.NotBefore, NotAfter: cert.NotAfter}); err != nil {
		t.Fatal(err)
	}
	return ca, leaf, block, cert
}

// TestIngressCertificateDelivery: a node running an ingress proxy gets a
// certificate with its key opened, with its own certificate only; another
// node, a node without a proxy, the admin token and a metrics certificate
// get 403 before anything tells whether the certificate exists; the
// ingress view shows the expiry and never the key.
func TestIngressCertificateDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	ca, leaf, block, cert := putShopCertificate(t, f)
	id, err := ca.AgeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{{InstanceID: "ingress-1", Node: "w1", Namespace: "kat-core", Workload: "ingress", Files: proxyFiles}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.WriteIngressRoutes(ctx, []api.IngressRoutes{{Namespace: "default", Workload: "shop", Rules: []api.IngressRule{
		{Host: "shop.test", Path: "/", Port: 80, TLS: true, TLSCertificate: "shop", Certificate: "fp1"},
		{Host: "new.test", Path: "/", Port: 80, TLS: true},
	}}}, nil); err != nil {
		t.Fatal(err)
	}
	clients := nodeClients(t, f, func(c *apiserver.Config) {
		c.Secrets = &apiserver.SecretKeys{Identity: id, KeyID: "k", Sealer: ca}
	}, "w1", "w2", api.MetricsCertPrefix+"prom")
	w1, w2, metrics, admin := clients[0], clients[1], clients[2], clients[3]

	b, err := w1.GetNodeIngressCertificate(ctx, "w1", api.CertificateFile, "shop")
	if err != nil || !bytes.Equal(b.KeyPEM, leaf.KeyPEM) || !bytes.Equal(b.ChainPEM, leaf.CertPEM) || b.Fingerprint != "fp1" {
		t.Fatalf("w1 gets shop: %s, %v", b.Fingerprint, err)
	}
	for _, c := range []struct {
		name     string
		get      func() error
		status   int
		contains string
	}{
		{"w2 asks as w1", func() error { _, err := w2.GetNodeIngressCertificate(ctx, "w1", "file", "shop"); return err }, http.StatusForbidden, "node w1 only"},
		{"w2 without a proxy", func() error { _, err := w2.GetNodeIngressCertificate(ctx, "w2", "file", "shop"); return err }, http.StatusForbidden, "node w2 runs no ingress proxy"},
		{"w2, a certificate that does not exist", func() error { _, err := w2.GetNodeIngressCertificate(ctx, "w2", "file", "nope"); return err }, http.StatusForbidden, "runs no ingress proxy"},
		{"w1, a certificate that does not exist", func() error { _, err := w1.GetNodeIngressCertificate(ctx, "w1", "file", "nope"); return err }, http.StatusNotFound, "nope"},
		{"the admin token", func() error { _, err := admin.GetNodeIngressCertificate(ctx, "w1", "file", "shop"); return err }, http.StatusForbidden, "own certificate"},
		{"a metrics certificate", func() error {
			_, err := metrics.GetNodeIngressCertificate(ctx, api.MetricsCertPrefix+"prom", "file", "shop")
			return err
		}, http.StatusForbidden, "may only scrape /metrics"},
	} {
		err := c.get()
		if statusOf(err) != c.status || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %v; want %d containing %q", c.name, err, c.status, c.contains)
		}
	}
	views, err := admin.ListIngress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(views)
	if bytes.Contains(out, block.Bytes) || strings.Contains(string(out), "PRIVATE") || strings.Contains(string(out), "sealed") {
		t.Errorf("the ingress view shows key material: %s", out)
	}
	got := map[string]api.IngressRouteView{}
	for _, v := range views {
		got[v.Host] = v
	}
	if v := got["shop.test"]; !v.CertificateNotAfter.Equal(cert.NotAfter) || v.Status != "NoBackends" {
		t.Errorf("shop.test: expires %s, status %s; want %s, NoBackends", v.CertificateNotAfter, v.Status, cert.NotAfter)
	}
	if v := got["new.test"]; v.Status != "CertificateMissing" || !strings.Contains(v.CertificateError, "not issued yet") {
		t.Errorf("new.test: status %s, error %q; want CertificateMissing, not issued yet", v.Status, v.CertificateError)
	}
}

// TestIngressCertificatesListAndDelete: GET /v1alpha1/ingress/certificates
// lists each record with its hosts, expiry, error and the rules using it,
// never its chain or key, to the admin token only; DELETE refuses a bad
// kind or name (400), an unknown certificate (404) and one a rule uses
// without force (409), changing nothing, deletes otherwise, and is audited.
func TestIngressCertificatesListAndDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	_, _, block, cert := putShopCertificate(t, f)
	notAfter := cert.NotAfter
	if err := f.repo.PutIngressCertificate(ctx, api.IngressCertificate{Kind: api.CertificateACME, Name: "old.test",
		LastError: "validate old.test: connection refused", Failures: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.WriteIngressRoutes(ctx, []api.IngressRoutes{{Namespace: "default", Workload: "shop", Rules: []api.IngressRule{
		{Host: "shop.test", Path: "/", Port: 80, TLS: true, TLSCertificate: "shop", Certificate: "fp1"},
		{Host: "shop.test", Path: "/api", Port: 80, TLS: true, TLSCertificate: "shop", Certificate: "fp1"},
	}}}, nil); err != nil {
		t.Fatal(err)
	}
	clients := nodeClients(t, f, nil, "w1")
	w1, admin := clients[0], clients[1]
	if _, err := w1.ListIngressCertificates(ctx); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("a node's certificate lists the ingress certificates: %v, want 401", err)
	}
	views, err := admin.ListIngressCertificates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(views)
	if bytes.Contains(out, block.Bytes) || strings.Contains(string(out), "PRIVATE") || strings.Contains(string(out), "CERTIFICATE") ||
		strings.Contains(string(out), "sealed") || strings.Contains(string(out), "chain") {
		t.Errorf("the certificate list shows key or chain material: %s", out)
	}
	if len(views) != 2 {
		t.Fatalf("certificates: %s; want acme/old.test and file/shop", out)
	}
	acme, file := views[0], views[1]
	if file.Kind+"/"+file.Name != "file/shop" || !file.NotAfter.Equal(notAfter) || strings.Join(file.Routes, "|") != "shop.test/ default/shop|shop.test/api default/shop" {
		t.Errorf("file/shop: %+v", file)
	}
	if acme.Kind+"/"+acme.Name != "acme/old.test" || acme.LastError == "" || len(acme.Routes) != 0 || acme.Failures != 2 {
		t.Errorf("acme/old.test: %+v", acme)
	}

	for _, c := range []struct {
		kind, name string
		force      bool
		status     int
		contains   string
	}{
		{"other", "shop", false, http.StatusBadRequest, `invalid certificate kind "other"`},
		{"file", "Shop_1", false, http.StatusBadRequest, `invalid certificate name "Shop_1"`},
		{"acme", "-bad.test", false, http.StatusBadRequest, `invalid certificate name "-bad.test"`},
		{"file", "nope", false, http.StatusNotFound, "nope"},
		{"file", "shop", false, http.StatusConflict, "serves shop.test/ default/shop, shop.test/api default/shop"},
	} {
		err := admin.DeleteIngressCertificate(ctx, c.kind, c.name, c.force)
		if statusOf(err) != c.status || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("delete %s/%s: %v; want %d containing %q", c.kind, c.name, err, c.status, c.contains)
		}
	}
	if err := w1.DeleteIngressCertificate(ctx, "acme", "old.test", false); statusOf(err) != http.StatusUnauthorized {
		t.Errorf("a node's certificate deletes an ingress certificate: %v, want 401", err)
	}
	if after, _ := f.repo.ListIngressCertificates(ctx); len(after) != 2 {
		t.Fatalf("refused deletes changed the records: %d left", len(after))
	}
	if err := admin.DeleteIngressCertificate(ctx, "acme", "old.test", false); err != nil {
		t.Errorf("delete an unused ACME certificate: %v", err)
	}
	if err := admin.DeleteIngressCertificate(ctx, "file", "shop", true); err != nil {
		t.Errorf("delete a used certificate with force: %v", err)
	}
	if after, _ := f.repo.ListIngressCertificates(ctx); len(after) != 0 {
		t.Errorf("after the deletes %d records are left", len(after))
	}
	entries, err := admin.ListAudit(ctx, api.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var audited []string
	for _, e := range entries {
		if e.Resource == "certificate" {
			audited = append(audited, fmt.Sprintf("%s %s %d", e.Verb, e.Name, e.Status))
		}
	}
	slices.Sort(audited)
	for _, want := range []string{"delete acme/old.test 204", "delete file/shop 204", "delete file/shop 409", "delete other/shop 400"} {
		if !slices.Contains(audited, want) {
			t.Errorf("audit entries %q lack %q", audited, want)
		}
	}
}
