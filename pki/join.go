package pki

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Fingerprint is the SHA-256 of a certificate's public key (its DER
// SubjectPublicKeyInfo), as kubeadm's discovery hash: it names the CA's key,
// so a CA certificate renewed with the same key keeps it.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// joinTokenPrefix starts every join token, naming its format.
const joinTokenPrefix = "katjoin1"

// ErrInvalidJoinToken means a join token is not of the form
// katjoin1.SECRET.FINGERPRINT.
var ErrInvalidJoinToken = errors.New("invalid join token")

// JoinToken is what a node needs to join a cluster: the secret the leader
// checks, and the fingerprint of the cluster CA, with which the node checks
// the leader before it sends the secret.
type JoinToken struct {
	// Secret is the cluster's join secret (hex); the leader keeps only its
	// SHA-256.
	Secret string
	// CAFingerprint is Fingerprint of the cluster CA ("sha256:" + hex).
	CAFingerprint string
}

// String is the token as init prints it: katjoin1.SECRET.HEX, where HEX is
// the CA fingerprint without its "sha256:".
func (t JoinToken) String() string {
	return joinTokenPrefix + "." + t.Secret + "." + strings.TrimPrefix(t.CAFingerprint, "sha256:")
}

// ParseJoinToken reads a token made by JoinToken.String. Surrounding space
// is ignored.
func ParseJoinToken(s string) (JoinToken, error) {
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) != 3 || parts[0] != joinTokenPrefix {
		return JoinToken{}, fmt.Errorf("%w: want %s.SECRET.FINGERPRINT, as kat-agent init prints it", ErrInvalidJoinToken, joinTokenPrefix)
	}
	if !isHex(parts[1], 32) {
		return JoinToken{}, fmt.Errorf("%w: the secret is not at least 32 hex digits", ErrInvalidJoinToken)
	}
	if !isHex(parts[2], sha256.Size*2) || len(parts[2]) != sha256.Size*2 {
		return JoinToken{}, fmt.Errorf("%w: the CA fingerprint is not %d hex digits", ErrInvalidJoinToken, sha256.Size*2)
	}
	return JoinToken{Secret: parts[1], CAFingerprint: "sha256:" + parts[2]}, nil
}

func isHex(s string, minLen int) bool {
	if len(s) < minLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// VerifyFingerprint checks that caPEM holds one CA certificate whose
// Fingerprint is want, and returns it.
func VerifyFingerprint(caPEM []byte, want string) (*x509.Certificate, error) {
	cert, err := ParseCertificate(caPEM)
	if err != nil {
		return nil, fmt.Errorf("parse the CA the server sent: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate the server sent as its CA is not a CA")
	}
	got := Fingerprint(cert)
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return nil, fmt.Errorf("the server's CA has fingerprint %s, the join token names %s: not this cluster's leader (or not the token of this cluster)", got, want)
	}
	return cert, nil
}
