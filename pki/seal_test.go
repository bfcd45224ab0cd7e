package pki

import (
	"bytes"
	"errors"
	"testing"
)

// TestSealOpen: a value sealed by a CA opens with that CA and purpose only,
// and a changed byte breaks it.
func TestSealOpen(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("seal-test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte("the join secret")
	sealed, err := ca.Seal("join token", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("the sealed value holds the plaintext")
	}
	again, err := ca.Seal("join token", plain)
	if err != nil || bytes.Equal(again, sealed) {
		t.Errorf("sealing twice gave the same bytes (%v): the nonce must be fresh", err)
	}
	if got, err := ca.Open("join token", sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q, %v", got, err)
	}
	// The same CA read back from its PEM (as a member has it) opens it.
	keyPEM, err := encodeKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	copyCA, err := ParseCA(ca.CertPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := copyCA.Open("join token", sealed); err != nil || !bytes.Equal(got, plain) {
		t.Errorf("open with the CA parsed from its files: %q, %v", got, err)
	}
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	for name, open := range map[string]func() ([]byte, error){
		"another CA":      func() ([]byte, error) { return other.Open("join token", sealed) },
		"another purpose": func() ([]byte, error) { return ca.Open("admin token", sealed) },
		"a flipped byte":  func() ([]byte, error) { return ca.Open("join token", flipped) },
		"too short":       func() ([]byte, error) { return ca.Open("join token", sealed[:8]) },
	} {
		if got, err := open(); !errors.Is(err, ErrSealBroken) || got != nil {
			t.Errorf("open with %s: %q, %v; want ErrSealBroken", name, got, err)
		}
	}
}
