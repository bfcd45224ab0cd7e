package leader

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
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

// tlsIngressFiles is lbFiles with one rule for host on the port named http
// with tls, from the certificate file cert ("" for ACME).
func tlsIngressFiles(t *testing.T, name, host, cert string) map[string][]byte {
	t.Helper()
	files := lbFiles(t, name, 1)
	rule := "    - {host: " + host + ", servicePortName: http, tls: true"
	if cert != "" {
		rule += ", tlsCertificate: " + cert
	}
	files["VirtualLoadBalancer.kat"] = append(files["VirtualLoadBalancer.kat"], []byte("  ingress:\n"+rule+"}\n")...)
	return files
}

// writePair writes NAME.crt and NAME.key of leaf into dir.
func writePair(t *testing.T, dir, name string, leaf *pki.Leaf) {
	t.Helper()
	for ext, b := range map[string][]byte{".key": leaf.KeyPEM, ".crt": leaf.CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// keyMaterial is what of leaf's key must never be seen: its PEM body and
// the base64 of its DER.
func keyMaterial(t *testing.T, keyPEM []byte) []string {
	t.Helper()
	block, _ := pem.Decode(keyPEM)
	body := strings.Join(strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1:2], "")
	return []string{body, base64.StdEncoding.EncodeToString(block.Bytes)[20:60], base64.RawURLEncoding.EncodeToString(block.Bytes)[20:60]}
}

// newCertEnv is a leader env with a CA and a certificate directory, and a
// workload per rule "host/cert" (named after the host's first label) with
// tls from the pair cert.
func newCertEnv(t *testing.T, rules ...string) (*leaderEnv, *pki.CA, string) {
	t.Helper()
	e := newLeaderEnv(t)
	ca, err := pki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		host, cert, _ := strings.Cut(r, "/")
		name, _, _ := strings.Cut(host, ".")
		e.apply(tlsIngressFiles(t, name, host, cert), api.APIOwner())
	}
	return e, ca, t.TempDir()
}

// TestLeaderImportsCertificateFiles: a pair dropped into the certificate
// directory is imported with its key sealed (never in the clear in etcd)
// and named by fingerprint in the routes of the hosts it covers; a pair
// that expires before the stored one is not imported; a broken pair keeps
// the last good certificate and records why, naming the file; a pair that
// disappears deletes nothing; and no key material reaches the log.
func TestLeaderImportsCertificateFiles(t *testing.T) {
	t.Parallel()
	e, ca, dir := newCertEnv(t, "shop.test/shop", "other.test/shop")
	var logs testenv.SyncBuffer
	_, stop := e.run(Config{Sealer: ca, IngressCertDir: dir, CertResync: 20 * time.Millisecond, Logger: zerolog.New(&logs)})
	defer stop()

	certOf := func(workload string) string {
		recs, _ := e.repo.ListIngressRoutes(e.ctx)
		for _, r := range recs {
			if r.Workload == workload && len(r.Rules) == 1 {
				return r.Rules[0].Certificate
			}
		}
		return "no rule"
	}
	stored := func() api.IngressCertificate {
		c, err := e.repo.GetIngressCertificate(e.ctx, api.CertificateFile, "shop")
		if err != nil {
			return api.IngressCertificate{}
		}
		return *c
	}
	polltest.Until(t, 10*time.Second, "a rule with tls and no certificate yet", func() bool { return certOf("shop") == "" })

	first, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, dir, "shop", first)
	polltest.Until(t, 10*time.Second, "shop.test's rule names the imported certificate", func() bool {
		return certOf("shop") != "" && certOf("shop") == stored().Fingerprint
	})
	if certOf("other") != "" {
		t.Errorf("other.test's rule names certificate %q, which does not cover other.test", certOf("other"))
	}
	rec := stored()
	kv, err := e.repo.Store().Get(e.ctx, resources.IngressCertificateKey(api.CertificateFile, "shop"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := keyMaterial(t, first.KeyPEM)
	for _, s := range secrets {
		if bytes.Contains(kv.Value, []byte(s)) {
			t.Fatalf("the stored record holds the key in the clear (%q)", s[:10])
		}
	}
	der, err := ca.Open(api.IngressCertificateSealPurpose(api.CertificateFile, "shop"), rec.SealedKey)
	if err != nil {
		t.Fatalf("open the sealed key: %v", err)
	}
	block, _ := pem.Decode(first.KeyPEM)
	if !bytes.Equal(der, block.Bytes) {
		t.Error("the sealed key opens to another key")
	}
	if _, err := ca.Open(api.IngressCertificateSealPurpose(api.CertificateFile, "other"), rec.SealedKey); err == nil {
		t.Error("the sealed key opens for another certificate's purpose")
	}

	// An older pair (a stale copy) is not imported.
	older, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, dir, "shop", older)
	// A broken pair (another's key) keeps the good certificate.
	broken := &pki.Leaf{CertPEM: older.CertPEM, KeyPEM: first.KeyPEM}
	writePair(t, dir, "shop", broken)
	polltest.Until(t, 10*time.Second, "the broken pair's error recorded", func() bool {
		return strings.Contains(stored().LastError, filepath.Join(dir, "shop.crt"))
	})
	if got := stored(); got.Fingerprint != rec.Fingerprint || certOf("shop") != rec.Fingerprint {
		t.Errorf("after a broken pair the certificate is %s (routes %s), want the first %s", got.Fingerprint, certOf("shop"), rec.Fingerprint)
	}
	t.Logf("recorded error: %s", stored().LastError)

	// Gone files delete nothing.
	for _, f := range []string{"shop.crt", "shop.key"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	// A renewal (later NotAfter) replaces it.
	renewed, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test", "other.test"}, Validity: 72 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, dir, "shop", renewed)
	polltest.Until(t, 10*time.Second, "the renewal imported and named by both rules", func() bool {
		fp := stored().Fingerprint
		return fp != rec.Fingerprint && certOf("shop") == fp && certOf("other") == fp && stored().LastError == ""
	})
	stop()
	for _, s := range append(secrets, keyMaterial(t, renewed.KeyPEM)...) {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the leader's log holds key material (%q)", s[:10])
		}
	}
}

// TestLeaderWatchesTheCertificateDirectory: with a resync far beyond the
// test's deadlines, a pair a rule names is recorded missing once the leader
// has looked (before: no record, which the API shows as pending), a new
// pair and a changed pair are imported on the directory's watch alone, and
// the missing record of a pair no rule names any more is deleted.
func TestLeaderWatchesTheCertificateDirectory(t *testing.T) {
	t.Parallel()
	e, ca, dir := newCertEnv(t, "shop.test/shop", "gone.test/gone")
	var watching atomic.Bool
	_, stop := e.run(Config{Sealer: ca, IngressCertDir: dir, CertResync: time.Hour,
		certWatchSynced: func(complete bool) { watching.Store(watching.Load() || complete) }})
	defer stop()
	stored := func(name string) (api.IngressCertificate, bool) {
		c, err := e.repo.GetIngressCertificate(e.ctx, api.CertificateFile, name)
		if err != nil {
			return api.IngressCertificate{}, false
		}
		return *c, true
	}
	for _, name := range []string{"shop", "gone"} {
		polltest.Until(t, 10*time.Second, name+" recorded missing", func() bool {
			c, _ := stored(name)
			return c.Fingerprint == "" && strings.Contains(c.LastError, "no certificate pair "+name+".crt and "+name+".key in the ingress certificate directory "+dir)
		})
	}
	polltest.Until(t, 10*time.Second, "the directory watched", watching.Load)

	first, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, dir, "shop", first)
	polltest.Until(t, 10*time.Second, "the new pair imported without a resync", func() bool {
		c, _ := stored("shop")
		return c.Fingerprint != "" && c.LastError == ""
	})
	fp := func() string { c, _ := stored("shop"); return c.Fingerprint }
	before := fp()
	renewed, err := ca.Issue(pki.LeafRequest{CommonName: "shop.test", DNSNames: []string{"shop.test"}, Validity: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writePair(t, dir, "shop", renewed)
	polltest.Until(t, 10*time.Second, "the changed pair imported without a resync", func() bool {
		return fp() != before && fp() != ""
	})

	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "gone", Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the missing record of a pair no rule names deleted", func() bool {
		_, ok := stored("gone")
		return !ok
	})
	if _, ok := stored("shop"); !ok {
		t.Error("the imported pair's record is gone")
	}
}
