package pki

import (
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"strings"

	"filippo.io/age"
)

// ageInfo is the HKDF info of the cluster's age identity; Seal's infos start
// with "kat seal ", so no purpose collides with it.
const ageInfo = "kat age identity v1"

// AgeIdentity is the cluster's age X25519 identity, derived from the CA's
// private key: files encrypted to AgeRecipient decrypt only where the CA key
// is (the etcd members). It is never stored; the same key always gives the
// same identity, so a restored data directory still decrypts.
func (ca *CA) AgeIdentity() (*age.X25519Identity, error) {
	if ca.Key == nil {
		return nil, fmt.Errorf("derive the age identity: the CA has no private key here")
	}
	secret, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("derive the age identity: encode the CA key: %w", err)
	}
	scalar, err := hkdf.Key(sha256.New, secret, nil, ageInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("derive the age identity: %w", err)
	}
	// age has no constructor from raw bytes: go through its text form.
	id, err := age.ParseX25519Identity(strings.ToUpper(bech32Encode("age-secret-key-", scalar)))
	if err != nil {
		return nil, fmt.Errorf("derive the age identity: %w", err)
	}
	return id, nil
}

// AgeRecipient is the public half of AgeIdentity, "age1...": what secrets
// in Git are encrypted to.
func (ca *CA) AgeRecipient() (string, error) {
	id, err := ca.AgeIdentity()
	if err != nil {
		return "", err
	}
	return id.Recipient().String(), nil
}

const bech32Charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"

func bech32Polymod(values []byte) uint32 {
	gen := [5]uint32{0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3}
	chk := uint32(1)
	for _, v := range values {
		b := chk >> 25
		chk = (chk&0x1ffffff)<<5 ^ uint32(v)
		for i := range 5 {
			if (b>>i)&1 == 1 {
				chk ^= gen[i]
			}
		}
	}
	return chk
}

// bech32Encode encodes 8-bit data under hrp as BIP 173 does (lowercase).
func bech32Encode(hrp string, data []byte) string {
	var conv []byte
	acc, bits := 0, 0
	for _, b := range data {
		acc = acc<<8 | int(b)
		bits += 8
		for bits >= 5 {
			bits -= 5
			conv = append(conv, byte(acc>>bits&31))
		}
	}
	if bits > 0 {
		conv = append(conv, byte(acc<<(5-bits)&31))
	}
	exp := make([]byte, 0, 2*len(hrp)+1+len(conv)+6)
	for _, c := range hrp {
		exp = append(exp, byte(c>>5))
	}
	exp = append(exp, 0)
	for _, c := range hrp {
		exp = append(exp, byte(c&31))
	}
	exp = append(append(exp, conv...), 0, 0, 0, 0, 0, 0)
	mod := bech32Polymod(exp) ^ 1
	var sb strings.Builder
	sb.WriteString(hrp)
	sb.WriteByte('1')
	for _, c := range conv {
		sb.WriteByte(bech32Charset[c])
	}
	for i := range 6 {
		sb.WriteByte(bech32Charset[(mod>>(5*(5-i)))&31])
	}
	return sb.String()
}
