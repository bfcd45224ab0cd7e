package pki

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
)

// ErrSealBroken is what Open returns for a sealed value that this CA did
// not seal for that purpose, or that was changed.
var ErrSealBroken = errors.New("sealed value does not open with this CA's key")

// Seal encrypts plaintext with a key derived from the CA's private key and
// purpose (AES-256-GCM, HKDF-SHA256), so that only holders of the CA key
// (the etcd members) can read it: a value kept in etcd, and so in its
// snapshots, stays secret without the key.
func (ca *CA) Seal(purpose string, plaintext []byte) ([]byte, error) {
	aead, err := ca.aead(purpose)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal %s: %w", purpose, err)
	}
	return aead.Seal(nonce, nonce, plaintext, []byte(purpose)), nil
}

// Open decrypts what Seal sealed for purpose with this CA; it returns an
// error wrapping ErrSealBroken otherwise.
func (ca *CA) Open(purpose string, sealed []byte) ([]byte, error) {
	aead, err := ca.aead(purpose)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("open %s: %w (too short)", purpose, ErrSealBroken)
	}
	nonce, box := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	out, err := aead.Open(nil, nonce, box, []byte(purpose))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", purpose, ErrSealBroken)
	}
	return out, nil
}

func (ca *CA) aead(purpose string) (cipher.AEAD, error) {
	if ca.Key == nil {
		return nil, fmt.Errorf("seal %s: the CA has no private key here", purpose)
	}
	secret, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("seal %s: encode the CA key: %w", purpose, err)
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "kat seal "+purpose, 32)
	if err != nil {
		return nil, fmt.Errorf("seal %s: derive the key: %w", purpose, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", purpose, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("seal %s: %w", purpose, err)
	}
	return aead, nil
}
