package leader

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/acme"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// ACMEConfig is how the leader gets certificates from an ACME CA (kat-agent
// --acme-directory, --acme-email, --acme-ca-file).
type ACMEConfig struct {
	// Directory is the CA's directory URL; "" turns ACME off.
	Directory string
	// Email is the account's contact; "" registers none.
	Email string
	// HTTPClient talks to the CA (it trusts the directory's TLS).
	// Default http.DefaultClient.
	HTTPClient *http.Client
	// ChallengeWait bounds the wait for every ingress proxy to answer a
	// challenge before the CA is asked to validate it. Default 30s.
	ChallengeWait time.Duration
	// RetryBase and RetryMax bound the back-off after a failed order:
	// RetryBase, doubled per failure in a row, at most RetryMax. Defaults
	// 1 minute and 1 hour (a CA limits failed validations per host and
	// hour).
	RetryBase, RetryMax time.Duration
	// UnroutedGrace is how long the certificate of a host no held rule
	// asks ACME for is kept (the host may come back: a new order would
	// count against the CA's rate limits) before the leader deletes it.
	// Default DefaultACMEUnroutedGrace.
	UnroutedGrace time.Duration
}

// DefaultACMEUnroutedGrace is ACMEConfig.UnroutedGrace's default.
const DefaultACMEUnroutedGrace = 7 * 24 * time.Hour

// acmeRenewAt is when a certificate valid from notBefore to notAfter is
// renewed: after two thirds of its lifetime.
func acmeRenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}

// acmeBackoff is the wait after the n-th failure in a row.
func acmeBackoff(cfg ACMEConfig, n int) time.Duration {
	d := cfg.RetryBase
	for i := 1; i < n && d < cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, cfg.RetryMax)
}

// acmeLoop issues and renews the certificates of every host a held
// ingress rule serves with tls and no tlsCertificate (docs/architecture.md
// "Ingress"): one account for the cluster, sealed in etcd; HTTP-01
// challenges published to every ingress proxy, and accepted once every
// proxy answers them; renewal at two thirds of a certificate's lifetime;
// back-off after a failure, with the reason in the certificate's record.
// It wakes on route and certificate changes and when a renewal or retry
// is due.
func (l *Leader) acmeLoop(ctx context.Context, sub *subscription) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	cfg := &l.cfg.ACME
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.ChallengeWait <= 0 {
		cfg.ChallengeWait = 30 * time.Second
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = time.Minute
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = time.Hour
	}
	if cfg.UnroutedGrace <= 0 {
		cfg.UnroutedGrace = DefaultACMEUnroutedGrace
	}
	is := &acmeIssuer{l: l, cfg: *cfg}
	for {
		l.view.take(sub)
		next := is.pass(ctx)
		wait := time.Until(next)
		if next.IsZero() {
			wait = l.cfg.Resync
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-sub.wake:
			t.Stop()
		}
	}
}

// acmeIssuer is one term's ACME client.
type acmeIssuer struct {
	l      *Leader
	cfg    ACMEConfig
	client *acme.Client
}

// acmeHosts are the hosts of the held rules that ask ACME for a
// certificate, sorted.
func (is *acmeIssuer) acmeHosts() []string {
	routes, _ := is.l.view.ingress.Snapshot()
	var hosts []string
	for _, r := range routes {
		for _, rule := range r.Rules {
			if rule.TLS && rule.TLSCertificate == "" && !strings.HasPrefix(rule.Host, "*.") {
				hosts = append(hosts, rule.Host)
			}
		}
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// pass issues or renews what is due and returns when the next one is
// (zero: nothing scheduled).
func (is *acmeIssuer) pass(ctx context.Context) time.Time {
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	log := is.l.cfg.Logger.With().Str("component", "acme").Logger()
	hosts := is.acmeHosts()
	for _, host := range hosts {
		if ctx.Err() != nil {
			return next
		}
		now := is.l.cfg.Now()
		have, _ := is.l.view.certs.Get(resources.IngressCertificateKey(api.CertificateACME, host))
		if !have.UnroutedSince.IsZero() {
			have.UnroutedSince = time.Time{} // routed again: kept
			if err := is.l.cfg.Repo.PutIngressCertificate(ctx, have); err != nil {
				log.Warn().Err(err).Str("host", host).Msg("ACME certificate's host routed again; not recorded")
				later(now.Add(is.cfg.RetryBase))
			}
		}
		if have.Fingerprint != "" && now.Before(have.RenewAt) && have.NextTryAt.IsZero() {
			later(have.RenewAt)
			continue
		}
		if now.Before(have.NextTryAt) {
			later(have.NextTryAt)
			continue
		}
		start := time.Now()
		rec, err := is.issue(ctx, host)
		if ctx.Err() != nil {
			return next
		}
		if err != nil {
			have.Kind, have.Name = api.CertificateACME, host
			have.Failures++
			have.LastError, have.LastErrorAt = err.Error(), now.UTC()
			have.NextTryAt = now.Add(acmeBackoff(is.cfg, have.Failures)).UTC()
			log.Warn().Err(err).Str("host", host).Int("failures", have.Failures).Time("next_try", have.NextTryAt).
				Msg("ACME certificate not issued; the last good one, if any, stays")
			if err := is.l.cfg.Repo.PutIngressCertificate(ctx, have); err != nil {
				log.Warn().Err(err).Str("host", host).Msg("ACME failure not recorded")
			}
			later(have.NextTryAt)
			continue
		}
		renewal := have.Fingerprint != ""
		if err := is.l.cfg.Repo.PutIngressCertificate(ctx, rec); err != nil {
			log.Warn().Err(err).Str("host", host).Msg("ACME certificate not stored")
			later(now.Add(is.cfg.RetryBase))
			continue
		}
		log.Info().Str("host", host).Str("fingerprint", rec.Fingerprint).Time("not_after", rec.NotAfter).
			Time("renew_at", rec.RenewAt).Bool("renewal", renewal).Dur("took", time.Since(start)).Msg("ACME certificate issued")
		later(rec.RenewAt)
	}
	is.collectUnrouted(ctx, hosts, later)
	return next
}

// collectUnrouted deletes, with a CertificateRemoved event, the ACME
// certificates whose host no held rule has asked for since
// UnroutedGrace; it marks those whose host it finds unrouted
// (UnroutedSince, shown by katcall get certificates) and calls later with
// when each deletion is due. A host routed again is unmarked by pass.
// hosts are the hosts asked for, sorted.
func (is *acmeIssuer) collectUnrouted(ctx context.Context, hosts []string, later func(time.Time)) {
	log := is.l.cfg.Logger.With().Str("component", "acme").Logger()
	repo, now := is.l.cfg.Repo, is.l.cfg.Now()
	certs, _ := is.l.view.certs.Snapshot()
	for _, key := range slices.Sorted(maps.Keys(certs)) {
		c := certs[key]
		if _, routed := slices.BinarySearch(hosts, c.Name); c.Kind != api.CertificateACME || routed || ctx.Err() != nil {
			continue
		}
		if c.UnroutedSince.IsZero() {
			c.UnroutedSince = now.UTC()
			if err := repo.PutIngressCertificate(ctx, c); err != nil {
				log.Warn().Err(err).Str("host", c.Name).Msg("ACME certificate's host no longer routed; not recorded")
				later(now.Add(is.cfg.RetryBase))
				continue
			}
			log.Info().Str("host", c.Name).Time("delete_at", c.UnroutedSince.Add(is.cfg.UnroutedGrace)).
				Msg("ACME certificate's host no longer routed; deleted after the grace period unless routed again")
		}
		if due := c.UnroutedSince.Add(is.cfg.UnroutedGrace); now.Before(due) {
			later(due)
			continue
		}
		if err := repo.DeleteIngressCertificate(ctx, c.Kind, c.Name); err != nil {
			log.Warn().Err(err).Str("host", c.Name).Msg("ACME certificate of an unrouted host not deleted")
			later(now.Add(is.cfg.RetryBase))
			continue
		}
		log.Info().Str("host", c.Name).Msg("ACME certificate of an unrouted host deleted")
		ev := api.CertificateRef(c.Kind, c.Name).Eventf(api.EventNormal, api.ReasonCertificateRemoved,
			"ACME certificate of %s deleted: no ingress rule has routed the host with tls since %s (grace %s)",
			c.Name, c.UnroutedSince.Format(time.RFC3339), is.cfg.UnroutedGrace)
		if err := repo.AppendEvents(ctx, []api.Event{ev}); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Str("host", c.Name).Msg("cannot record the certificate's removal")
		}
	}
}

// issue runs one order for host: the certificate's record, key sealed.
func (is *acmeIssuer) issue(ctx context.Context, host string) (api.IngressCertificate, error) {
	c, err := is.account(ctx)
	if err != nil {
		return api.IngressCertificate{}, err
	}
	order, err := c.AuthorizeOrder(ctx, acme.DomainIDs(host))
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("order a certificate for %s: %w", host, err)
	}
	for _, u := range order.AuthzURLs {
		if err := is.authorize(ctx, c, host, u); err != nil {
			return api.IngressCertificate{}, err
		}
	}
	if order, err = c.WaitOrder(ctx, order.URI); err != nil {
		return api.IngressCertificate{}, fmt.Errorf("wait for the order of %s: %w", host, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("make a key for %s: %w", host, err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{host}}, key)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("make the request of %s: %w", host, err)
	}
	chain, _, err := c.CreateCertFromOrder(ctx, order, csr, true)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("finalize the order of %s: %w", host, err)
	}
	rec, err := certificateRecord(api.CertificateACME, host, chain, key, is.l.cfg.Sealer)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("store the certificate of %s: %w", host, err)
	}
	if !rec.Covers(host) {
		return api.IngressCertificate{}, fmt.Errorf("the CA's certificate for %s names %s", host, strings.Join(rec.Hosts, ", "))
	}
	rec.RenewAt = acmeRenewAt(rec.NotBefore, rec.NotAfter).UTC()
	return rec, nil
}

// authorize proves host for the authorization at url by HTTP-01: the
// answer is published to every ingress proxy, the CA is asked to validate
// once every proxy serves it, and it is withdrawn whatever the outcome.
func (is *acmeIssuer) authorize(ctx context.Context, c *acme.Client, host, url string) error {
	z, err := c.GetAuthorization(ctx, url)
	if err != nil {
		return fmt.Errorf("read the authorization of %s: %w", host, err)
	}
	if z.Status == acme.StatusValid {
		return nil
	}
	var chal *acme.Challenge
	for _, ch := range z.Challenges {
		if ch.Type == "http-01" {
			chal = ch
		}
	}
	if chal == nil {
		return fmt.Errorf("the CA offers no http-01 challenge for %s", host)
	}
	ka, err := c.HTTP01ChallengeResponse(chal.Token)
	if err != nil {
		return fmt.Errorf("answer the challenge of %s: %w", host, err)
	}
	repo := is.l.cfg.Repo
	if err := repo.PutACMEChallenge(ctx, api.ACMEChallenge{
		Token: chal.Token, KeyAuthorization: ka, Host: host, Expires: is.l.cfg.Now().Add(10 * time.Minute).UTC(),
	}); err != nil {
		return err
	}
	defer func() {
		// Withdrawn even when ctx ended (a lost term): a fresh context.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := repo.DeleteACMEChallenge(dctx, chal.Token); err != nil {
			is.l.cfg.Logger.Warn().Str("component", "acme").Err(err).Str("host", host).Msg("challenge not withdrawn")
		}
	}()
	if err := is.waitProxies(ctx, chal.Token); err != nil {
		return fmt.Errorf("publish the challenge of %s: %w", host, err)
	}
	if _, err := c.Accept(ctx, chal); err != nil {
		return fmt.Errorf("accept the challenge of %s: %w", host, err)
	}
	if _, err := c.WaitAuthorization(ctx, z.URI); err != nil {
		return fmt.Errorf("validate %s: %w", host, err)
	}
	return nil
}

// waitProxies returns once every Ready node running an ingress proxy
// reports that it answers token.
func (is *acmeIssuer) waitProxies(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, is.cfg.ChallengeWait)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		missing, proxies := is.notAnswering(token)
		switch {
		case proxies > 0 && len(missing) == 0:
			return nil
		case ctx.Err() != nil && proxies == 0:
			return errors.New("no ingress proxy runs on a Ready node to answer it")
		case ctx.Err() != nil:
			return fmt.Errorf("the ingress proxies of %s do not answer it after %s", strings.Join(missing, ", "), is.cfg.ChallengeWait)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// notAnswering returns the Ready nodes with a proxy, assigned or
// reporting, that does not yet answer token, and how many Ready nodes
// have a proxy. A proxy assigned but not yet reporting counts as not
// answering: the CA may ask any ingress node.
func (is *acmeIssuer) notAnswering(token string) (missing []string, proxies int) {
	now := is.l.cfg.Now()
	v := is.l.view
	nodes := map[string]bool{}
	statuses, _ := v.nodes.Snapshot()
	for _, st := range statuses {
		if st.Ingress != nil {
			nodes[st.NodeName] = true
		}
	}
	assigns, _ := v.assigns.Snapshot()
	for _, a := range assigns {
		if a.LeavingAt.IsZero() && !nodes[a.Node] {
			s := v.specs.get(api.WorkloadMeta{Namespace: a.Namespace, Name: a.Workload, SpecHash: a.SpecHash}, a.Files)
			nodes[a.Node] = s != nil && s.IngressProxy
		}
	}
	for node, proxy := range nodes {
		if !proxy || !v.nodeReady(node, now) {
			continue
		}
		proxies++
		st, ok := v.nodes.Get(resources.NodeStatusKey(node))
		if !ok || st.Ingress == nil || !slices.Contains(strings.Fields(st.Ingress.ACMETokens), token) {
			missing = append(missing, node)
		}
	}
	slices.Sort(missing)
	return missing, proxies
}

// account returns the term's client, with the cluster's account: the
// stored one for this directory, or a new one registered and stored.
func (is *acmeIssuer) account(ctx context.Context) (*acme.Client, error) {
	if is.client != nil {
		return is.client, nil
	}
	repo, sealer := is.l.cfg.Repo, is.l.cfg.Sealer
	c := &acme.Client{DirectoryURL: is.cfg.Directory, HTTPClient: is.cfg.HTTPClient, UserAgent: "kat"}
	stored, err := repo.GetACMEAccount(ctx)
	if err != nil {
		return nil, err
	}
	if stored != nil && stored.Directory == is.cfg.Directory {
		der, err := sealer.Open(api.ACMEAccountSealPurpose, stored.SealedKey)
		if err != nil {
			return nil, fmt.Errorf("open the ACME account key: %w", err)
		}
		key, err := x509.ParsePKCS8PrivateKey(der)
		clear(der)
		if err != nil {
			return nil, fmt.Errorf("parse the ACME account key: %w", err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, errors.New("the ACME account key cannot sign")
		}
		c.Key, c.KID = signer, acme.KeyID(stored.URI)
		is.client = c
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the ACME account key: %w", err)
	}
	c.Key = key
	acct := &acme.Account{}
	if is.cfg.Email != "" {
		acct.Contact = []string{"mailto:" + is.cfg.Email}
	}
	reg, err := c.Register(ctx, acct, acme.AcceptTOS)
	if err != nil {
		return nil, fmt.Errorf("register with the ACME directory %s: %w", is.cfg.Directory, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the ACME account key: %w", err)
	}
	sealed, err := sealer.Seal(api.ACMEAccountSealPurpose, der)
	clear(der)
	if err != nil {
		return nil, fmt.Errorf("seal the ACME account key: %w", err)
	}
	if err := repo.PutACMEAccount(ctx, api.ACMEAccount{Directory: is.cfg.Directory, URI: reg.URI, Email: is.cfg.Email, SealedKey: sealed}); err != nil {
		return nil, err
	}
	is.l.cfg.Logger.Info().Str("component", "acme").Str("directory", is.cfg.Directory).Str("account", reg.URI).Msg("ACME account registered")
	is.client = c
	return c, nil
}
