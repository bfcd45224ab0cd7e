package pki

import (
	"strings"
	"testing"

	"filippo.io/age"
)

// testCAKey is a TEST-ONLY CA key: its derived recipient is pinned below.
const testCAKey = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgNrElX4FYryshzQsE
desKUQ7bCPNjaNPlL5MwDVSN8LahRANCAAQiIbVDyObXuPyoYay+/28wjvU/tDI4
LMGK8n2Nl75otjOdasmWm6lGOb3Jg+qAfUvmGwXfnmVOHInckcCqfZ7N
-----END PRIVATE KEY-----
`

// goldenRecipient is what testCAKey derives. A change here means every
// secret of every cluster stops decrypting: never update it to make the
// test pass.
const goldenRecipient = "age1c0n645uwyxkck7yaadufm9nmltcxya4c2wyhhuf6yrrymstdw4jshyaaqd"

// TestAgeIdentityIsStable pins the derivation (PKCS#8 encoding, HKDF info,
// bech32) to a fixed key, checks that two CAs differ and that a CA without
// its key refuses.
func TestAgeIdentityIsStable(t *testing.T) {
	t.Parallel()
	key, err := ParsePrivateKey([]byte(testCAKey))
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Key: key}
	got, err := ca.AgeRecipient()
	if err != nil {
		t.Fatal(err)
	}
	if got != goldenRecipient {
		t.Errorf("recipient = %s, want %s", got, goldenRecipient)
	}
	id, err := ca.AgeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ca.AgeIdentity(); err != nil || again.String() != id.String() {
		t.Errorf("a second derivation differs (%v)", err)
	}
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := other.AgeRecipient(); err != nil || r == got {
		t.Errorf("another CA derives %s, %v; want a different recipient", r, err)
	}
	if _, err := (&CA{}).AgeIdentity(); err == nil || !strings.Contains(err.Error(), "no private key") {
		t.Errorf("a CA without its key: %v", err)
	}
}

// TestBech32MatchesAge encodes scalars age generated and gets back the text
// age itself prints.
func TestBech32MatchesAge(t *testing.T) {
	t.Parallel()
	for range 20 {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			t.Fatal(err)
		}
		scalar := bech32Data(t, strings.ToLower(id.String()))
		if got := strings.ToUpper(bech32Encode("age-secret-key-", scalar)); got != id.String() {
			t.Fatalf("bech32Encode = %s, want %s", got, id.String())
		}
	}
}

// bech32Data decodes the data part of a bech32 string (no checksum check:
// the comparison of the re-encoding checks it).
func bech32Data(t *testing.T, s string) []byte {
	t.Helper()
	i := strings.LastIndexByte(s, '1')
	var out []byte
	acc, bits := 0, 0
	for _, c := range s[i+1 : len(s)-6] {
		v := strings.IndexRune(bech32Charset, c)
		if v < 0 {
			t.Fatalf("bad bech32 %q", s)
		}
		acc = acc<<5 | v
		bits += 5
		if bits >= 8 {
			bits -= 8
			out = append(out, byte(acc>>bits))
		}
	}
	return out
}
