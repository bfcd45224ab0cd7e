// Package rejoin is how a detached node finds its cluster on the LAN
// (docs/detached.md "Rejoining"): it multicasts a request signed with its
// node key (its certificate of the cluster CA attached, a timestamp and a
// nonce against replays), and a member that hears it answers with its API
// address and etcd client URLs, signed with its own key under the same
// CA, echoing the nonce, so that no one else can lure the node elsewhere.
package rejoin

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"kat.dws.rip/kat/pki"
)

// DefaultGroup is the multicast group and port of rejoin requests: an
// organisation-local address (RFC 2365) that stays on the LAN.
const DefaultGroup = "239.255.84.75:9117"

// Window is how far a message's time may be from the receiver's clock, and
// how long a nonce is remembered: a request replayed within it is a nonce
// seen before, one replayed later is too old.
const Window = 30 * time.Second

// maxMessage bounds a message: a certificate, a signature and a few names.
const maxMessage = 8 << 10

// Message kinds, signed with the body so one cannot pass for the other.
const (
	kindRequest = "kat-rejoin-request"
	kindAnswer  = "kat-rejoin-answer"
)

// ErrIgnored wraps every reason a message is not taken: forged, replayed,
// stale, of another cluster, malformed.
var ErrIgnored = errors.New("rejoin: message ignored")

// Request is what a detached node multicasts.
type Request struct {
	ClusterUID string `json:"clusterUID"`
	Cluster    string `json:"cluster"`
	Node       string `json:"node"`
	// Time is when it was sent, Unix milliseconds.
	Time  int64  `json:"time"`
	Nonce string `json:"nonce"`
}

// Answer is a member's reply to a Request.
type Answer struct {
	ClusterUID string `json:"clusterUID"`
	// Node and Nonce are the request's: an answer to another request is
	// ignored.
	Node  string `json:"node"`
	Nonce string `json:"nonce"`
	// Member is the answering member; its certificate names it.
	Member        string   `json:"member"`
	APIURL        string   `json:"apiURL"`
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
	Time          int64    `json:"time"`
}

// envelope is a message on the wire: its kind, body, the signer's
// certificate (DER) and the signature over kind and body.
type envelope struct {
	Kind string          `json:"kind"`
	Body json.RawMessage `json:"body"`
	Cert []byte          `json:"cert"`
	Sig  []byte          `json:"sig"`
}

func digest(kind string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// Signer signs messages with a node's key.
type Signer struct {
	der []byte
	key crypto.Signer
}

// NewSigner returns the signer of a node certificate and key.
func NewSigner(leaf *pki.Leaf) (*Signer, error) {
	c, err := leaf.TLSCertificate()
	if err != nil {
		return nil, err
	}
	key, ok := c.PrivateKey.(crypto.Signer)
	if !ok || len(c.Certificate) == 0 {
		return nil, errors.New("rejoin: the node key cannot sign")
	}
	return &Signer{der: c.Certificate[0], key: key}, nil
}

func (s *Signer) seal(kind string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", kind, err)
	}
	sig, err := s.key.Sign(rand.Reader, digest(kind, body), crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", kind, err)
	}
	return json.Marshal(envelope{Kind: kind, Body: body, Cert: s.der, Sig: sig})
}

// NewRequest makes a fresh request (new nonce, time now) and its signed
// bytes.
func (s *Signer) NewRequest(clusterUID, cluster, node string, now time.Time) (Request, []byte, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return Request{}, nil, fmt.Errorf("make a nonce: %w", err)
	}
	r := Request{ClusterUID: clusterUID, Cluster: cluster, Node: node, Time: now.UnixMilli(), Nonce: hex.EncodeToString(nonce)}
	b, err := s.seal(kindRequest, r)
	return r, b, err
}

// Answer signs a's answer to r.
func (s *Signer) Answer(r Request, a Answer, now time.Time) ([]byte, error) {
	a.ClusterUID, a.Node, a.Nonce, a.Time = r.ClusterUID, r.Node, r.Nonce, now.UnixMilli()
	return s.seal(kindAnswer, a)
}

// Verifier checks messages: signed by a certificate of the cluster CA,
// of the cluster, fresh, and (requests) never seen before.
type Verifier struct {
	roots      *x509.CertPool
	clusterUID string
	mu         sync.Mutex
	seen       map[string]time.Time // nonce -> when it expires
}

// NewVerifier returns a verifier of the cluster clusterUID whose CA is
// roots.
func NewVerifier(roots *x509.CertPool, clusterUID string) *Verifier {
	return &Verifier{roots: roots, clusterUID: clusterUID, seen: map[string]time.Time{}}
}

// open checks b's envelope: its kind, size, certificate chain and
// signature; it returns the body and the signer's name.
func (v *Verifier) open(b []byte, kind string) ([]byte, string, error) {
	if len(b) > maxMessage {
		return nil, "", fmt.Errorf("%w: %d bytes, more than %d", ErrIgnored, len(b), maxMessage)
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrIgnored, err)
	}
	if e.Kind != kind {
		return nil, "", fmt.Errorf("%w: a %q message where a %q was expected", ErrIgnored, e.Kind, kind)
	}
	cert, err := x509.ParseCertificate(e.Cert)
	if err != nil {
		return nil, "", fmt.Errorf("%w: certificate: %w", ErrIgnored, err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: v.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, "", fmt.Errorf("%w: the certificate of %q is not the cluster CA's: %w", ErrIgnored, cert.Subject.CommonName, err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !ecdsa.VerifyASN1(pub, digest(e.Kind, e.Body), e.Sig) {
		return nil, "", fmt.Errorf("%w: bad signature of %q", ErrIgnored, cert.Subject.CommonName)
	}
	return e.Body, cert.Subject.CommonName, nil
}

func fresh(t int64, now time.Time) error {
	if d := now.Sub(time.UnixMilli(t)).Abs(); d > Window {
		return fmt.Errorf("%w: sent %s from this clock, more than %s", ErrIgnored, d.Round(time.Second), Window)
	}
	return nil
}

// Request checks a request heard at now: signed by the node it names, of
// this cluster, fresh, its nonce never seen before (it is then
// remembered for Window).
func (v *Verifier) Request(b []byte, now time.Time) (*Request, error) {
	body, signer, err := v.open(b, kindRequest)
	if err != nil {
		return nil, err
	}
	var r Request
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIgnored, err)
	}
	switch {
	case r.Node != signer:
		return nil, fmt.Errorf("%w: a request for node %q signed by %q", ErrIgnored, r.Node, signer)
	case r.ClusterUID != v.clusterUID:
		return nil, fmt.Errorf("%w: a request for cluster %s", ErrIgnored, r.ClusterUID)
	case len(r.Nonce) != 32:
		return nil, fmt.Errorf("%w: nonce %q", ErrIgnored, r.Nonce)
	}
	if err := fresh(r.Time, now); err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for n, until := range v.seen {
		if now.After(until) {
			delete(v.seen, n)
		}
	}
	if _, dup := v.seen[r.Nonce]; dup {
		return nil, fmt.Errorf("%w: a replay of node %s's request %s", ErrIgnored, r.Node, r.Nonce)
	}
	v.seen[r.Nonce] = now.Add(2 * Window)
	return &r, nil
}

// Answer checks an answer to req heard at now: signed by the member it
// names, of this cluster, fresh, and for req.
func (v *Verifier) Answer(b []byte, req Request, now time.Time) (*Answer, error) {
	body, signer, err := v.open(b, kindAnswer)
	if err != nil {
		return nil, err
	}
	var a Answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIgnored, err)
	}
	switch {
	case a.Member != signer:
		return nil, fmt.Errorf("%w: an answer from member %q signed by %q", ErrIgnored, a.Member, signer)
	case a.ClusterUID != v.clusterUID:
		return nil, fmt.Errorf("%w: an answer from cluster %s", ErrIgnored, a.ClusterUID)
	case a.Node != req.Node || a.Nonce != req.Nonce:
		return nil, fmt.Errorf("%w: an answer to another request", ErrIgnored)
	}
	if err := fresh(a.Time, now); err != nil {
		return nil, err
	}
	return &a, nil
}
