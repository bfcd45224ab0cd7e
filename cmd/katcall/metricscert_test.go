package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestMetricsCertCommand: katcall metrics-cert writes a key (0600), a
// certificate of the cluster CA named kat-metrics:NAME for it and the CA;
// it refuses to replace them without --overwrite, and bad arguments are
// refused naming the argument before anything is asked or written.
func TestMetricsCertCommand(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	dir := filepath.Join(t.TempDir(), "prom")
	code, stdout, stderr := c.katcall("metrics-cert", "prometheus", "--out-dir", dir, "--days", "10")
	if code != 0 {
		t.Fatalf("katcall metrics-cert: exit %d\n%s", code, stderr)
	}
	crt, key, ca := filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key"), filepath.Join(dir, "ca.crt")
	if want := crt + "\n" + key + "\n" + ca + "\n"; stdout != want {
		t.Errorf("stdout %q, want the three paths %q", stdout, want)
	}
	if info, err := os.Stat(key); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the key file: %v, %v; want mode 0600", info, err)
	}
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatalf("the certificate and key do not match: %v", err)
	}
	cert := pair.Leaf
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(readFileT(t, ca)) {
		t.Fatal("ca.crt holds no certificate")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not verify against ca.crt: %v", err)
	}
	if cert.Subject.CommonName != api.MetricsCertPrefix+"prometheus" {
		t.Errorf("common name %q", cert.Subject.CommonName)
	}
	if d := time.Until(cert.NotAfter) - 10*24*time.Hour; d > time.Minute || d < -time.Minute {
		t.Errorf("not after %s, want 10 days from now", cert.NotAfter)
	}
	if !strings.Contains(stderr, "kat-metrics:prometheus") {
		t.Errorf("stderr %q does not name the certificate", stderr)
	}

	before := readFileT(t, key)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"metrics-cert", "prometheus", "--out-dir", dir}, "--overwrite"},
		{[]string{"metrics-cert", "Prom", "--out-dir", dir}, "NAME"},
		{[]string{"metrics-cert", "other", "--out-dir", dir, "--days", "0"}, "--days"},
		{[]string{"metrics-cert", "other", "--out-dir", dir, "--days", "9999"}, "--days"},
		{[]string{"metrics-cert", "--out-dir", dir}, "arg"},
	} {
		code, _, stderr := c.katcall(tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("katcall %s: exit %d %q, want a failure naming %s", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	if string(readFileT(t, key)) != string(before) {
		t.Error("a refused metrics-cert replaced the key")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.key")); err == nil {
		t.Error("a refused metrics-cert wrote other.key")
	}
	if code, _, stderr := c.katcall("metrics-cert", "prometheus", "--out-dir", dir, "--overwrite"); code != 0 {
		t.Errorf("metrics-cert --overwrite: exit %d %s", code, stderr)
	}
	if string(readFileT(t, key)) == string(before) {
		t.Error("metrics-cert --overwrite kept the old key")
	}
}

func readFileT(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
