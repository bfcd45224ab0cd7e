package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Paths names the PEM files of one certificate and its key.
type Paths struct {
	Cert string
	Key  string
}

// PathsIn returns the conventional paths for name in dir: dir/name.crt and
// dir/name.key.
func PathsIn(dir, name string) Paths {
	return Paths{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
}

// EnsureCA loads the CA at p, or creates and saves a new one when neither file
// exists. It reports whether the CA was created. Exactly one of the two files
// existing is an error: the directory was damaged and must not be papered over.
func EnsureCA(p Paths, commonName string) (ca *CA, created bool, err error) {
	certPEM, keyPEM, found, err := readPair(p)
	if err != nil {
		return nil, false, err
	}
	if found {
		ca, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return nil, false, fmt.Errorf("load ca from %s: %w", p.Cert, err)
		}
		return ca, false, nil
	}
	ca, err = NewCA(commonName)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err = encodeKey(ca.Key)
	if err != nil {
		return nil, false, err
	}
	if err := writePair(p, ca.CertPEM, keyPEM); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// EnsureLeaf loads the leaf at p when it exists, was signed by ca and covers
// req's names; otherwise it issues a new one and saves it. It reports whether a
// new certificate was issued.
func EnsureLeaf(p Paths, ca *CA, req LeafRequest) (leaf *Leaf, issued bool, err error) {
	certPEM, keyPEM, found, err := readPair(p)
	if err != nil {
		return nil, false, err
	}
	if found && leafMatches(certPEM, keyPEM, ca, req) {
		return &Leaf{CertPEM: certPEM, KeyPEM: keyPEM}, false, nil
	}
	leaf, err = ca.Issue(req)
	if err != nil {
		return nil, false, err
	}
	if err := writePair(p, leaf.CertPEM, leaf.KeyPEM); err != nil {
		return nil, false, err
	}
	return leaf, true, nil
}

func leafMatches(certPEM, keyPEM []byte, ca *CA, req LeafRequest) bool {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return false
	}
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return false
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil || !publicKeysEqual(cert.PublicKey, key.Public()) {
		return false
	}
	for _, name := range req.DNSNames {
		if cert.VerifyHostname(name) != nil {
			return false
		}
	}
	for _, ip := range req.IPs {
		if cert.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	return true
}

// WriteFileAtomic writes data to path through a temporary file in the same
// directory and a rename, with the given mode.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readPair(p Paths) (certPEM, keyPEM []byte, found bool, err error) {
	certPEM, certErr := os.ReadFile(p.Cert)
	keyPEM, keyErr := os.ReadFile(p.Key)
	certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist)
	switch {
	case certMissing && keyMissing:
		return nil, nil, false, nil
	case certMissing != keyMissing:
		return nil, nil, false, fmt.Errorf("load %s and %s: only one of the pair exists", p.Cert, p.Key)
	case certErr != nil:
		return nil, nil, false, fmt.Errorf("read %s: %w", p.Cert, certErr)
	case keyErr != nil:
		return nil, nil, false, fmt.Errorf("read %s: %w", p.Key, keyErr)
	}
	return certPEM, keyPEM, true, nil
}

func writePair(p Paths, certPEM, keyPEM []byte) error {
	if err := WriteFileAtomic(p.Key, keyPEM, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(p.Cert, certPEM, 0o644)
}
