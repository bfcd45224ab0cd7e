package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// IngressCertificateSource fetches an ingress certificate with its key for
// the node's proxy: from the leader's API, with the node's certificate
// (LeaderLink).
type IngressCertificateSource interface {
	IngressCertificate(ctx context.Context, kind, name string) (*api.IngressCertificateBundle, error)
}

// heldCertificate is a certificate the updater fetched, kept in memory
// only (never on disk): its key prints as "[redacted]".
type heldCertificate struct {
	chainPEM []byte
	key      quadlet.SecretValue
}

// ingressTLS is the updater's TLS half: the certificates the routes name,
// fetched by fingerprint, and the ACME challenges, pushed into HAProxy's
// memory over its admin socket.
type ingressTLS struct {
	source     IngressCertificateSource
	challenges *store.Cache[api.ACMEChallenge]
	// held are the certificates fetched, by fingerprint; only the
	// updater's goroutine touches it.
	held map[string]heldCertificate
}

func newIngressTLS(ag *Agent) *ingressTLS {
	return &ingressTLS{
		source: ag.cfg.IngressCertificates,
		held:   map[string]heldCertificate{},
		challenges: store.NewCache(ag.cfg.Repo.Store(), resources.IngressChallengesPrefix(), func(kv store.KV) (api.ACMEChallenge, bool) {
			c, err := resources.DecodeACMEChallenge(kv)
			return c, err == nil
		}),
	}
}

// enabled reports whether the proxy serves HTTPS: its run directory has a
// crt-list (prepareIngressProxy writes one for a proxy with a port named
// https).
func (t *ingressTLS) enabled(run string) bool {
	_, err := os.Stat(filepath.Join(run, haproxy.CertList))
	return err == nil
}

// apply brings the proxy's certificates and ACME answers to the routes and
// challenges. The error names certificates and commands, never keys.
func (t *ingressTLS) apply(ctx context.Context, u *ingressUpdater, routes []api.IngressRoutes) (haproxy.TLSApplied, error) {
	type source struct{ kind, name, fingerprint string }
	hosts := map[source][]string{}
	for _, r := range routes {
		for _, rule := range r.Rules {
			if rule.TLS && rule.Certificate != "" {
				kind, name := rule.TLSSource()
				s := source{kind, name, rule.Certificate}
				hosts[s] = append(hosts[s], rule.Host)
			}
		}
	}
	var errs []error
	var want []haproxy.Certificate
	wanted := map[string]bool{}
	for _, s := range slices.SortedFunc(maps.Keys(hosts), func(a, b source) int {
		return strings.Compare(a.kind+"/"+a.name, b.kind+"/"+b.name)
	}) {
		wanted[s.fingerprint] = true
		h, ok := t.held[s.fingerprint]
		if !ok {
			var err error
			if h, err = t.fetch(ctx, s.kind, s.name, s.fingerprint); err != nil {
				errs = append(errs, err)
				continue
			}
			t.held[s.fingerprint] = h
		}
		want = append(want, haproxy.NewCertificate(s.fingerprint, hosts[s], h.chainPEM, h.key.Reveal()))
	}
	maps.DeleteFunc(t.held, func(fp string, _ heldCertificate) bool { return !wanted[fp] })
	now := u.ag.cfg.Now()
	answers := map[string]string{}
	snap, _ := t.challenges.Snapshot()
	for _, c := range snap {
		if now.Before(c.Expires) && validToken(c.Token) && validToken(c.KeyAuthorization) {
			answers[c.Token] = c.KeyAuthorization
		}
	}
	applied, err := u.client.ApplyTLS(ctx, u.dir, want, answers)
	return applied, errors.Join(append(errs, err)...)
}

// fetch asks the leader for the certificate of kind and name, which the
// routes name by fingerprint.
func (t *ingressTLS) fetch(ctx context.Context, kind, name, fingerprint string) (heldCertificate, error) {
	if t.source == nil {
		return heldCertificate{}, fmt.Errorf("certificate %s/%s: this agent cannot fetch ingress certificates", kind, name)
	}
	b, err := t.source.IngressCertificate(ctx, kind, name)
	if err != nil {
		return heldCertificate{}, fmt.Errorf("fetch certificate %s/%s: %w", kind, name, err)
	}
	if b.Fingerprint != fingerprint {
		// The leader holds a newer one; the routes will name it soon.
		return heldCertificate{}, fmt.Errorf("fetch certificate %s/%s: the leader serves %s, the routes name %s", kind, name, b.Fingerprint, fingerprint)
	}
	return heldCertificate{chainPEM: b.ChainPEM, key: quadlet.NewSecretValue(b.KeyPEM)}, nil
}

// validToken reports whether s may go into a map entry: ACME tokens and
// key authorizations are base64url with dots.
func validToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_' && r != '.'
	})
}
