package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	agelib "filippo.io/age"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
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

// TestSecretSet: set encrypts here and sends the encrypted file; get shows
// keys and versions, never a value; a second set with a new value moves
// the version; delete removes it.
func TestSecretSet(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	if _, err := c.repo.EnsureNamespace(ctx, "default", nil); err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(blob, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(ctx, append([]string{"--config", c.config}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("katcall %v: %d %s", args, code, stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	for i, v := range []string{sealSentinel + "1", sealSentinel + "2"} {
		out := call("secret", "set", "default/api", "--from-literal", "password="+v, "--from-file", "blob="+blob)
		if want := fmt.Sprintf("secret default/api version %d (keys blob, password)", i+1); !strings.Contains(out, want) || strings.Contains(out, sealSentinel) {
			t.Errorf("set: %q, want %q", out, want)
		}
		_, values, err := c.repo.OpenSecret(ctx, "default", "api", c.ca)
		if err != nil || string(values["password"].Reveal()) != v || !bytes.Equal(values["blob"].Reveal(), []byte{0, 1, 2, 0xff}) {
			t.Errorf("stored values differ: %v", err)
		}
	}
	if out := call("get", "secrets", "-o", "json"); !strings.Contains(out, `"binaryKeys"`) || strings.Contains(out, sealSentinel) || strings.Contains(out, "sealed") {
		t.Errorf("get secrets: %s", out)
	}
	// The table names the workloads using it, and shows no value.
	q, err := quadlet.ParseWorkload(map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: default}
spec:
  type: Service
  source: {image: "localhost/kat-base:latest"}
  replicas: 1
  restartPolicy: {condition: Always}
  container:
    env:
      - name: PASSWORD
        valueFrom: {secretKeyRef: {name: api, key: password}}
`)}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	table := call("get", "secrets")
	if lines := strings.Split(strings.TrimSpace(table), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "USED-BY") ||
		!slices.Contains(strings.Fields(lines[1]), "web") || strings.Contains(table, sealSentinel) || strings.Contains(table, "ERROR") {
		t.Errorf("get secrets:\n%s\nwant USED-BY web, no ERROR column", table)
	}
	call("secret", "delete", "default/api")
	if _, err := c.repo.GetSecret(ctx, "default", "api"); err == nil {
		t.Error("the secret is still there")
	}
}
