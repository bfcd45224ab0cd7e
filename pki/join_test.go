package pki

import (
	"errors"
	"strings"
	"testing"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	tok := JoinToken{Secret: strings.Repeat("ab", 32), CAFingerprint: Fingerprint(ca.Cert)}
	got, err := ParseJoinToken(" " + tok.String() + "\n")
	if err != nil || got != tok {
		t.Fatalf("ParseJoinToken(%q) = %+v, %v; want %+v", tok.String(), got, err, tok)
	}
	if _, err := VerifyFingerprint(ca.CertPEM, got.CAFingerprint); err != nil {
		t.Fatalf("the token's own CA: %v", err)
	}
	other, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyFingerprint(other.CertPEM, got.CAFingerprint); err == nil || !strings.Contains(err.Error(), "not this cluster's leader") {
		t.Fatalf("another CA of the same name: got %v, want a fingerprint mismatch", err)
	}
	leaf, err := ca.Issue(LeafRequest{CommonName: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	leafCert, err := ParseCertificate(leaf.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyFingerprint(leaf.CertPEM, Fingerprint(leafCert)); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Fatalf("a leaf sent as the CA: got %v", err)
	}
}

func TestParseJoinTokenRefuses(t *testing.T) {
	fp := strings.Repeat("0f", 32)
	for _, tc := range []struct{ name, tok, want string }{
		{"empty", "", "want katjoin1.SECRET.FINGERPRINT"},
		{"bare secret", strings.Repeat("ab", 32), "want katjoin1.SECRET.FINGERPRINT"},
		{"other prefix", "katjoin2." + strings.Repeat("ab", 32) + "." + fp, "want katjoin1"},
		{"short secret", "katjoin1.abcd." + fp, "secret is not at least 32 hex digits"},
		{"secret not hex", "katjoin1." + strings.Repeat("zz", 32) + "." + fp, "secret is not"},
		{"short fingerprint", "katjoin1." + strings.Repeat("ab", 32) + ".0f0f", "fingerprint is not 64 hex digits"},
		{"long fingerprint", "katjoin1." + strings.Repeat("ab", 32) + "." + fp + "00", "fingerprint is not 64 hex digits"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJoinToken(tc.tok)
			if !errors.Is(err, ErrInvalidJoinToken) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidJoinToken saying %q", err, tc.want)
			}
		})
	}
}
