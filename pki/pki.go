package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// DefaultCAValidity is how long a new cluster CA is valid: ten years;
// KAT does not rotate its CA yet.
const DefaultCAValidity = 10 * 365 * 24 * time.Hour

// DefaultLeafValidity is how long an issued node certificate is valid.
const DefaultLeafValidity = 5 * 365 * 24 * time.Hour

// ErrInvalidPEM is returned when a file or buffer does not hold the PEM block
// that was expected.
var ErrInvalidPEM = errors.New("pki: invalid PEM")

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
}

// NewCA creates a self-signed CA with the given common name, valid for
// [DefaultCAValidity].
func NewCA(commonName string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ca key: %w", err)
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"KAT"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultCAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse ca certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: encodeCert(der)}, nil
}

// ParseCA builds a CA from PEM-encoded certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := ParseCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("parse ca certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("parse ca certificate: %q is not a CA", cert.Subject.CommonName)
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parse ca key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("parse ca: key does not match certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM}, nil
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// LeafRequest describes a certificate to issue.
type LeafRequest struct {
	// CommonName is the node or client name.
	CommonName string
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	// Validity defaults to DefaultLeafValidity.
	Validity time.Duration
}

// Leaf is an issued certificate with its private key, both PEM-encoded.
type Leaf struct {
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate returns the leaf as a tls.Certificate.
func (l *Leaf) TLSCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("load key pair: %w", err)
	}
	return c, nil
}

// Issue creates a key and a certificate signed by the CA, usable for both
// server and client authentication.
func (ca *CA) Issue(req LeafRequest) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key for %q: %w", req.CommonName, err)
	}
	der, err := ca.sign(req, key.Public())
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key for %q: %w", req.CommonName, err)
	}
	return &Leaf{
		CertPEM: encodeCert(der),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// SignCSR checks a PEM-encoded certificate signing request and returns a
// PEM-encoded certificate for its key. The names (common name, DNS names,
// IPs) and validity come from req, never from the request: a requester
// cannot choose its identity, nor claim another node's address.
func (ca *CA) SignCSR(csrPEM []byte, req LeafRequest) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("decode csr: %w", ErrInvalidPEM)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("check csr signature: %w", err)
	}
	der, err := ca.sign(req, csr.PublicKey)
	if err != nil {
		return nil, err
	}
	return encodeCert(der), nil
}

func (ca *CA) sign(req LeafRequest, pub crypto.PublicKey) ([]byte, error) {
	if req.CommonName == "" {
		return nil, errors.New("issue certificate: empty common name")
	}
	validity := req.Validity
	if validity <= 0 {
		validity = DefaultLeafValidity
	}
	now := time.Now()
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: []string{"KAT"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", req.CommonName, err)
	}
	return der, nil
}

// NewCSR creates a key and a PEM-encoded certificate signing request for it.
func NewCSR(commonName string, dnsNames []string, ips []net.IP) (csrPEM, keyPEM []byte, err error) {
	if keyPEM, err = NewKeyPEM(); err != nil {
		return nil, nil, err
	}
	csrPEM, err = CSRForKey(keyPEM, &x509.CertificateRequest{Subject: pkix.Name{CommonName: commonName}, DNSNames: dnsNames, IPAddresses: ips})
	return csrPEM, keyPEM, err
}

// NewKeyPEM creates an ECDSA P-256 key, PEM-encoded (PKCS #8).
func NewKeyPEM() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// CSRForKey returns a PEM-encoded certificate signing request of tpl signed
// with the PEM key keyPEM.
func CSRForKey(keyPEM []byte, tpl *x509.CertificateRequest) ([]byte, error) {
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tpl, key)
	if err != nil {
		return nil, fmt.Errorf("create csr: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCertificate decodes the first PEM certificate in b.
func ParseCertificate(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, ErrInvalidPEM
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParsePrivateKey decodes a PEM private key (PKCS#8 or SEC 1 EC).
func ParsePrivateKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, ErrInvalidPEM
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("key of type %T cannot sign", k)
		}
		return s, nil
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%w: unexpected block %q", ErrInvalidPEM, block.Type)
	}
}

// CertPool returns a pool with every certificate in the PEM buffer.
func CertPool(pemCerts []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemCerts) {
		return nil, fmt.Errorf("load certificate authority: %w", ErrInvalidPEM)
	}
	return p, nil
}

// ServerTLSConfig returns a TLS 1.3 server configuration for the leaf. With
// requireClientCert, clients must present a certificate signed by clientCAs.
func ServerTLSConfig(leaf *Leaf, clientCAs *x509.CertPool, requireClientCert bool) (*tls.Config, error) {
	cert, err := leaf.TLSCertificate()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, ClientCAs: clientCAs}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientTLSConfig returns a TLS 1.3 client configuration that trusts only
// roots, presenting leaf when it is not nil.
func ClientTLSConfig(roots *x509.CertPool, leaf *Leaf) (*tls.Config, error) {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if leaf != nil {
		cert, err := leaf.TLSCertificate()
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func randomSerial() *big.Int {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		// crypto/rand never fails on Linux; a zero serial would still be a valid certificate.
		return big.NewInt(1)
	}
	return n.Add(n, big.NewInt(1))
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
