package sops

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"go.yaml.in/yaml/v3"
)

func identity(t testing.TB, name string) *age.X25519Identity {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	id, err := age.ParseX25519Identity(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// plainOf decodes a plaintext YAML tree into plain Go values.
func plainOf(t *testing.T, n *yaml.Node) map[string]any {
	t.Helper()
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func plainFile(t *testing.T, name string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(readFile(t, name), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDecryptSopsFiles decrypts files the sops 3.13.3 CLI made (see
// testdata/README.md) with the cluster's test identity and gets the
// plaintext back, MAC checked.
func TestDecryptSopsFiles(t *testing.T) {
	t.Parallel()
	cluster := identity(t, "TEST-ONLY-cluster.agekey")
	want := plainFile(t, "plain.yaml")
	for _, name := range []string{"sops-enc.yaml", "sops-all.yaml", "maconly.yaml"} {
		t.Run(name, func(t *testing.T) {
			doc, err := Decrypt(readFile(t, name), cluster)
			if err != nil {
				t.Fatal(err)
			}
			if got := plainOf(t, doc.Tree); !reflect.DeepEqual(got, want) {
				t.Errorf("decrypted:\n%v\nwant\n%v", got, want)
			}
			if doc.Recipient != cluster.Recipient().String() {
				t.Errorf("opened by %s, want %s", doc.Recipient, cluster.Recipient())
			}
		})
	}
	// Unquoted numbers and booleans come back in sops' spelling and type.
	doc, err := Decrypt(readFile(t, "typed-enc.yaml"), cluster)
	if err != nil {
		t.Fatal(err)
	}
	got := plainOf(t, doc.Tree)["stringData"]
	wantTyped := map[string]any{"port": 5432, "enabled": true, "ratio": 1.5, "text": "x"}
	if !reflect.DeepEqual(got, wantTyped) {
		t.Errorf("typed values: %v, want %v", got, wantTyped)
	}
}

// TestDecryptKeepsLines: the decrypted tree has the encrypted file's lines,
// so errors point at the file in Git.
func TestDecryptKeepsLines(t *testing.T) {
	t.Parallel()
	doc, err := Decrypt(readFile(t, "sops-enc.yaml"), identity(t, "TEST-ONLY-cluster.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(doc.Tree.Content); i += 2 {
		if doc.Tree.Content[i].Value == "stringData" {
			if l := doc.Tree.Content[i+1].Content[2].Line; l != 11 {
				t.Errorf("stringData.password on line %d, want 11", l)
			}
			return
		}
	}
	t.Fatal("no stringData")
}

// TestRoundTrip: what Encrypt writes, Decrypt reads, with every rule, for
// each recipient; lastmodified is double-quoted (sops refuses a YAML
// timestamp).
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	cluster, admin := identity(t, "TEST-ONLY-cluster.agekey"), identity(t, "TEST-ONLY-admin.agekey")
	plain := readFile(t, "plain.yaml")
	want := plainFile(t, "plain.yaml")
	for _, rules := range []Rules{DefaultRules, {}, {UnencryptedSuffix: "_unencrypted"}, {EncryptedSuffix: "ata"},
		{UnencryptedRegex: "^metadata$", MACOnlyEncrypted: true}} {
		enc, err := Encrypt(plain, []*age.X25519Recipient{cluster.Recipient(), admin.Recipient()}, rules, time.Now())
		if err != nil {
			t.Fatalf("%+v: %v", rules, err)
		}
		if bytes.Contains(enc, []byte("MARKER")) {
			t.Errorf("%+v: the file holds a value in clear:\n%s", rules, enc)
		}
		if !regexpMatch(`(?m)^    lastmodified: "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"$`, enc) {
			t.Errorf("%+v: lastmodified is not double-quoted:\n%s", rules, enc)
		}
		for _, id := range []*age.X25519Identity{cluster, admin} {
			doc, err := Decrypt(enc, id)
			if err != nil {
				t.Fatalf("%+v: decrypt: %v", rules, err)
			}
			if got := plainOf(t, doc.Tree); !reflect.DeepEqual(got, want) {
				t.Errorf("%+v: round trip gave %v", rules, got)
			}
		}
	}
}

func regexpMatch(re string, b []byte) bool {
	return regexpMust(re).Match(b)
}

// TestRefusals: every file Decrypt or Encrypt must refuse, with a message
// naming why and never the value.
func TestRefusals(t *testing.T) {
	t.Parallel()
	cluster, admin := identity(t, "TEST-ONLY-cluster.agekey"), identity(t, "TEST-ONLY-admin.agekey")
	const sentinel = "s3cr3t-MARKER-7f1c"
	good := readFile(t, "sops-enc.yaml")
	swap := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("fixture lacks %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	// Move password's ciphertext to username: GCM additional data differs.
	lines := strings.Split(string(good), "\n")
	lines[9], lines[10] = "    username:"+strings.SplitN(lines[10], ":", 2)[1], "    password:"+strings.SplitN(lines[9], ":", 2)[1]
	moved := []byte(strings.Join(lines, "\n"))
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		data []byte
		id   age.Identity
		want string
	}{
		{"plaintext", readFile(t, "plain.yaml"), cluster, "not encrypted"},
		{"moved value", moved, cluster, "line 10: stringData.username: does not decrypt"},
		{"changed clear field", swap("name: db", "name: dc"), cluster, "sops.mac: does not match"},
		{"removed key", regexpMust(`(?m)^    username: .*\n`).ReplaceAll(good, nil), cluster, "sops.mac: does not match"},
		{"changed lastmodified", regexpMust(`lastmodified: "[^"]*"`).ReplaceAll(good, []byte(`lastmodified: "2020-01-01T00:00:00Z"`)), cluster, "sops.mac: does not decrypt"},
		{"wrong identity", good, other, "not encrypted to this cluster: its age recipients are " + cluster.Recipient().String() + ", " + admin.Recipient().String()},
		{"key groups", swap("sops:\n", "sops:\n    shamir_threshold: 2\n"), cluster, "sops.shamir_threshold: key groups"},
		{"comment rule", swap("sops:\n", "sops:\n    encrypted_comment_regex: x\n"), cluster, "sops.encrypted_comment_regex: not supported"},
		{"two documents", append(bytes.Clone(good), []byte("---\na: b\n")...), cluster, "more than one YAML document"},
		{"alias", swap("    empty: \"\"", "    empty: &x \"\"\n    other: *x"), cluster, "aliases are not supported"},
		{"list", []byte("- a\n"), cluster, "must be a YAML mapping"},
	} {
		_, err := Decrypt(c.data, c.id)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), sentinel) {
			t.Errorf("%s: the error holds the value: %v", c.name, err)
		}
	}
	var ni *NoIdentityError
	if _, err := Decrypt(good, other); !errors.As(err, &ni) || len(ni.Recipients) != 2 {
		t.Errorf("wrong identity: %v, want a NoIdentityError with 2 recipients", err)
	}
	if _, err := Decrypt(readFile(t, "plain.yaml"), cluster); !errors.Is(err, ErrNotEncrypted) {
		t.Errorf("plaintext: %v, want ErrNotEncrypted", err)
	}
	// Encrypt refuses numbers where a string is encrypted, and a file
	// already encrypted.
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"number", readFile(t, "typed.yaml"), "line 6: stringData.port: must be a string: quote it"},
		{"encrypted", good, "already encrypted"},
		{"two rules", nil, "only one of"},
	} {
		rules := DefaultRules
		if c.data == nil {
			rules.UnencryptedSuffix, c.data = "_x", readFile(t, "plain.yaml")
		}
		_, err := Encrypt(c.data, []*age.X25519Recipient{cluster.Recipient()}, rules, time.Now())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("encrypt %s: %v; want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestRecipients lists a file's recipients without a key.
func TestRecipients(t *testing.T) {
	t.Parallel()
	got, err := Recipients(readFile(t, "sops-enc.yaml"))
	want := []string{identity(t, "TEST-ONLY-cluster.agekey").Recipient().String(), identity(t, "TEST-ONLY-admin.agekey").Recipient().String()}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Recipients = %v, %v; want %v", got, err, want)
	}
}

// FuzzDecrypt: no input panics, and nothing but a valid file decrypts.
func FuzzDecrypt(f *testing.F) {
	for _, name := range []string{"sops-enc.yaml", "sops-all.yaml", "maconly.yaml", "typed-enc.yaml", "ours-enc.yaml", "plain.yaml"} {
		f.Add(readFile(f, name))
	}
	id := identity(f, "TEST-ONLY-cluster.agekey")
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Decrypt(data, id)
	})
}
