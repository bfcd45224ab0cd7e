package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Ingress TLS keys (docs/architecture.md "Ingress"). Certificates and the
// ACME account hold sealed keys: members only. Challenges are public (the
// CA fetches them over plain HTTP): every worker may read them, as its
// proxy answers them.
const (
	prefixIngressCerts      = "/kat/ingress/certs/"
	prefixIngressChallenges = "/kat/ingress/challenges/"
	keyACMEAccount          = "/kat/ingress/acme/account"
)

// IngressCertificatesPrefix is the prefix of every ingress certificate.
func IngressCertificatesPrefix() string { return prefixIngressCerts }

// IngressCertificateKey is where the certificate of kind and name lives.
func IngressCertificateKey(kind, name string) string { return prefixIngressCerts + kind + "/" + name }

// DecodeIngressCertificate decodes the record at kv, checking that it is
// the one its key names.
func DecodeIngressCertificate(kv store.KV) (api.IngressCertificate, error) {
	rest, _ := strings.CutPrefix(kv.Key, prefixIngressCerts)
	kind, name, ok := strings.Cut(rest, "/")
	if !strings.HasPrefix(kv.Key, prefixIngressCerts) || !ok || name == "" || strings.Contains(name, "/") {
		return api.IngressCertificate{}, fmt.Errorf("%s is not an ingress certificate key (%s{kind}/{name})", kv.Key, prefixIngressCerts)
	}
	var c api.IngressCertificate
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		return api.IngressCertificate{}, fmt.Errorf("decode ingress certificate %s: %w", kv.Key, err)
	}
	if c.Kind != kind || c.Name != name {
		return api.IngressCertificate{}, fmt.Errorf("ingress certificate %s names %s/%s", kv.Key, c.Kind, c.Name)
	}
	return c, nil
}

// GetIngressCertificate reads one certificate record; ErrNotFound when
// there is none.
func (r *Repo) GetIngressCertificate(ctx context.Context, kind, name string) (*api.IngressCertificate, error) {
	kv, err := r.st.Get(ctx, IngressCertificateKey(kind, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("ingress certificate %s/%s: %w", kind, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read ingress certificate %s/%s: %w", kind, name, err)
	}
	c, err := DecodeIngressCertificate(*kv)
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// ListIngressCertificates returns every certificate record, sorted by key;
// records that do not decode are skipped.
func (r *Repo) ListIngressCertificates(ctx context.Context) ([]api.IngressCertificate, error) {
	kvs, err := r.st.List(ctx, prefixIngressCerts)
	if err != nil {
		return nil, fmt.Errorf("list ingress certificates: %w", err)
	}
	out := make([]api.IngressCertificate, 0, len(kvs))
	for _, kv := range kvs {
		if c, err := DecodeIngressCertificate(kv); err == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// PutIngressCertificate writes a certificate record; its key must be
// sealed already.
func (r *Repo) PutIngressCertificate(ctx context.Context, c api.IngressCertificate) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode ingress certificate %s/%s: %w", c.Kind, c.Name, err)
	}
	if err := r.st.Put(ctx, IngressCertificateKey(c.Kind, c.Name), b); err != nil {
		return fmt.Errorf("write ingress certificate %s/%s: %w", c.Kind, c.Name, err)
	}
	return nil
}

// DeleteIngressCertificate deletes a certificate record; deleting one that
// is not there is no error.
func (r *Repo) DeleteIngressCertificate(ctx context.Context, kind, name string) error {
	if err := r.st.Delete(ctx, IngressCertificateKey(kind, name)); err != nil {
		return fmt.Errorf("delete ingress certificate %s/%s: %w", kind, name, err)
	}
	return nil
}

// IngressChallengesPrefix is the prefix of the ACME challenges.
func IngressChallengesPrefix() string { return prefixIngressChallenges }

// DecodeACMEChallenge decodes the challenge at kv.
func DecodeACMEChallenge(kv store.KV) (api.ACMEChallenge, error) {
	var c api.ACMEChallenge
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		return api.ACMEChallenge{}, fmt.Errorf("decode ACME challenge %s: %w", kv.Key, err)
	}
	if kv.Key != prefixIngressChallenges+c.Token || c.Token == "" {
		return api.ACMEChallenge{}, fmt.Errorf("ACME challenge %s holds token %q", kv.Key, c.Token)
	}
	return c, nil
}

// PutACMEChallenge publishes a challenge to the proxies.
func (r *Repo) PutACMEChallenge(ctx context.Context, c api.ACMEChallenge) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode ACME challenge for %s: %w", c.Host, err)
	}
	if err := r.st.Put(ctx, prefixIngressChallenges+c.Token, b); err != nil {
		return fmt.Errorf("publish ACME challenge for %s: %w", c.Host, err)
	}
	return nil
}

// DeleteACMEChallenge withdraws a challenge.
func (r *Repo) DeleteACMEChallenge(ctx context.Context, token string) error {
	if err := r.st.Delete(ctx, prefixIngressChallenges+token); err != nil {
		return fmt.Errorf("withdraw ACME challenge: %w", err)
	}
	return nil
}

// ListACMEChallenges returns every published challenge.
func (r *Repo) ListACMEChallenges(ctx context.Context) ([]api.ACMEChallenge, error) {
	kvs, err := r.st.List(ctx, prefixIngressChallenges)
	if err != nil {
		return nil, fmt.Errorf("list ACME challenges: %w", err)
	}
	out := make([]api.ACMEChallenge, 0, len(kvs))
	for _, kv := range kvs {
		if c, err := DecodeACMEChallenge(kv); err == nil {
			out = append(out, c)
		}
	}
	return out, nil
}

// GetACMEAccount reads the ACME account; nil when there is none.
func (r *Repo) GetACMEAccount(ctx context.Context) (*api.ACMEAccount, error) {
	var a api.ACMEAccount
	ver, err := r.getJSON(ctx, keyACMEAccount, &a)
	if err != nil {
		return nil, fmt.Errorf("read the ACME account: %w", err)
	}
	if ver == 0 {
		return nil, nil
	}
	return &a, nil
}

// PutACMEAccount writes the ACME account; its key must be sealed already.
func (r *Repo) PutACMEAccount(ctx context.Context, a api.ACMEAccount) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode the ACME account: %w", err)
	}
	if err := r.st.Put(ctx, keyACMEAccount, b); err != nil {
		return fmt.Errorf("write the ACME account: %w", err)
	}
	return nil
}
