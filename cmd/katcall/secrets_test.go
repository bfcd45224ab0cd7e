package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	agelib "filippo.io/age"

	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
)

const sealSentinel = "seal-SENTINEL-c0ffee"

// TestSecretSeal: seal encrypts a plaintext Secret to the cluster and the
// extra recipients, offline, and refuses an invalid Secret or overwriting
// its input without printing a value.
func TestSecretSeal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cluster, err := agelib.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	me, err := agelib.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("db.yaml", "apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: \""+sealSentinel+"\"\n")
	out := filepath.Join(dir, "db.sops.yaml")
	seal := func(args ...string) (string, int) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"--config", filepath.Join(dir, "none.yaml"), "secret", "seal"}, args...), &stdout, &stderr)
		return stdout.String() + stderr.String(), code
	}
	if msg, code := seal("-f", plain, "-o", out, "--cluster-recipient", cluster.Recipient().String(), "--recipient", me.Recipient().String()); code != 0 {
		t.Fatalf("seal: %d %s", code, msg)
	}
	enc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(enc, []byte(sealSentinel)) {
		t.Fatal("the sealed file holds the value")
	}
	for _, id := range []*agelib.X25519Identity{cluster, me} {
		doc, err := sops.Decrypt(enc, id)
		if err != nil {
			t.Fatal(err)
		}
		s, err := quadlet.ParseSecret("db.sops.yaml", doc.Tree)
		if err != nil || string(s.Values["password"].Reveal()) != sealSentinel {
			t.Fatalf("decrypted secret: %v", err)
		}
	}
	bad := write("bad.yaml", "apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  port: 5432\n  password: \""+sealSentinel+"\"\n  a b: \""+sealSentinel+"\"\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-f", bad, "--cluster-recipient", cluster.Recipient().String()}, `bad.yaml:6: stringData["port"]: must be a string, got a number`},
		{[]string{"-f", plain, "-o", plain, "--cluster-recipient", cluster.Recipient().String()}, "would overwrite the plaintext input"},
		{[]string{"-f", plain, "--cluster-recipient", "age1nope"}, `recipient "age1nope"`},
	} {
		msg, code := seal(c.args...)
		if code == 0 || !strings.Contains(msg, c.want) || strings.Contains(msg, sealSentinel) {
			t.Errorf("seal %v: %d %q; want a failure containing %q and no value", c.args, code, msg, c.want)
		}
	}
}
