package leader

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/filewatch"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// DefaultCertResync is how often the leader reads the ingress certificate
// directory again without a change reported by its watch
// (Config.CertResync): the safety net for a lost event or a file system
// that sends none.
const DefaultCertResync = time.Minute

// certRetry is the wait before a failed import is tried again (an etcd
// write that failed), when it is shorter than the resync.
const certRetry = 5 * time.Second

// certFiles imports the certificate pairs of the ingress certificate
// directory (Config.IngressCertDir: NAME.crt, the chain in PEM, leaf first,
// and NAME.key, a PEM private key) into sealed records
// /kat/ingress/certs/file/NAME: at the start of each term, after each
// change the directory's watch reports, when the routes change (a rule may
// name a pair not read yet) and every CertResync. A pair that does not load
// keeps the last good certificate and records why (naming the file, never
// its content); a pair older than the stored one (a stale copy on another
// member) is not imported; a pair that disappears deletes nothing. A pair a
// routed rule names that is not in the directory is recorded as missing
// (an error, no certificate), so that `katcall get ingress` tells a pair
// not read yet (pending) from one the leader looked for and did not find.
func (l *Leader) certFiles(ctx context.Context, sub *subscription) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	log := l.cfg.Logger.With().Str("component", "ingress-certs").Logger()
	changed := make(chan struct{}, 1)
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = filewatch.Run(wctx, filewatch.Config{Dirs: []string{l.cfg.IngressCertDir}, Logger: log, Synced: l.cfg.certWatchSynced},
			func() { reconcile.Poke(changed) })
	}()
	defer func() { stop(); <-watched }()
	for {
		l.view.take(sub)
		wait := l.cfg.CertResync
		if err := l.importCertFiles(ctx); err != nil && ctx.Err() == nil {
			log.Warn().Err(err).Dur("retry_in", min(wait, certRetry)).Msg("certificate import failed; retrying")
			wait = min(wait, certRetry)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-changed:
			t.Stop()
		case <-sub.wake:
			t.Stop()
		}
	}
}

// importCertFiles reads the directory once.
func (l *Leader) importCertFiles(ctx context.Context) error {
	dir := l.cfg.IngressCertDir
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read the ingress certificate directory %s: %w", dir, err)
	}
	log := l.cfg.Logger.With().Str("component", "ingress-certs").Logger()
	var errs []error
	present := map[string]bool{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".crt")
		if !ok || e.IsDir() || !quadlet.IsDNSLabel(name) {
			continue
		}
		present[name] = true
		have, _ := l.view.certs.Get(resources.IngressCertificateKey(api.CertificateFile, name))
		rec, err := readCertPair(dir, name, l.cfg.Now(), l.cfg.Sealer)
		if err != nil {
			if have.LastError == err.Error() {
				continue
			}
			log.Warn().Err(err).Str("certificate", name).Msg("certificate pair not imported; the last good one stays")
			have.Kind, have.Name = api.CertificateFile, name
			have.LastError, have.LastErrorAt = err.Error(), l.cfg.Now().UTC()
			errs = append(errs, l.cfg.Repo.PutIngressCertificate(ctx, have))
			continue
		}
		switch {
		case have.Fingerprint == rec.Fingerprint && have.LastError == "":
			continue
		case have.Fingerprint != rec.Fingerprint && rec.NotAfter.Before(have.NotAfter):
			if have.LastError == "" {
				log.Warn().Str("certificate", name).Time("not_after", rec.NotAfter).Time("stored_not_after", have.NotAfter).
					Msg("certificate pair expires before the stored one: not imported")
			}
			continue
		case have.Fingerprint == rec.Fingerprint:
			rec = have
			rec.LastError, rec.LastErrorAt = "", time.Time{}
		}
		if err := l.cfg.Repo.PutIngressCertificate(ctx, rec); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info().Str("certificate", name).Str("fingerprint", rec.Fingerprint).Strs("hosts", rec.Hosts).
			Time("not_after", rec.NotAfter).Msg("certificate imported")
	}
	return errors.Join(append(errs, l.recordMissingCertFiles(ctx, present))...)
}

// recordMissingCertFiles records, for every pair a routed rule names that
// the directory lacks (present holds the names it has) and that has no
// certificate stored, that it is missing; and deletes the records that hold
// only that error (no certificate) once no rule names them.
func (l *Leader) recordMissingCertFiles(ctx context.Context, present map[string]bool) error {
	named := map[string]bool{}
	routes, _ := l.view.ingress.Snapshot()
	for _, r := range routes {
		for _, rule := range r.Rules {
			if rule.TLS && rule.TLSCertificate != "" {
				named[rule.TLSCertificate] = true
			}
		}
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(named)) {
		have, _ := l.view.certs.Get(resources.IngressCertificateKey(api.CertificateFile, name))
		if present[name] || have.Fingerprint != "" {
			continue
		}
		msg := fmt.Sprintf("no certificate pair %s.crt and %s.key in the ingress certificate directory %s of the leader",
			name, name, l.cfg.IngressCertDir)
		if have.LastError == msg {
			continue
		}
		l.cfg.Logger.Warn().Str("component", "ingress-certs").Str("certificate", name).Str("dir", l.cfg.IngressCertDir).
			Msg("a route names a certificate pair the directory lacks")
		errs = append(errs, l.cfg.Repo.PutIngressCertificate(ctx, api.IngressCertificate{
			Kind: api.CertificateFile, Name: name, LastError: msg, LastErrorAt: l.cfg.Now().UTC(),
		}))
	}
	certs, _ := l.view.certs.Snapshot()
	for _, c := range certs {
		if c.Kind == api.CertificateFile && c.Fingerprint == "" && !named[c.Name] && !present[c.Name] {
			errs = append(errs, l.cfg.Repo.DeleteIngressCertificate(ctx, c.Kind, c.Name))
		}
	}
	return errors.Join(errs...)
}

// readCertPair loads NAME.crt and NAME.key of dir into a record with the
// key sealed. Its errors name the files, never their content.
func readCertPair(dir, name string, now time.Time, sealer resources.Sealer) (api.IngressCertificate, error) {
	crtFile, keyFile := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	crtPEM, err := os.ReadFile(crtFile)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("read %s: %w", crtFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("read %s: %w", keyFile, err)
	}
	pair, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("load %s and %s: %w", crtFile, keyFile, err)
	}
	rec, err := certificateRecord(api.CertificateFile, name, pair.Certificate, pair.PrivateKey, sealer)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("load %s and %s: %w", crtFile, keyFile, err)
	}
	if !now.Before(rec.NotAfter) {
		return api.IngressCertificate{}, fmt.Errorf("load %s: the certificate expired at %s", crtFile, rec.NotAfter.Format(time.RFC3339))
	}
	return rec, nil
}

// certificateRecord makes the record of a chain (DER, leaf first) and its
// key, sealed for kind and name.
func certificateRecord(kind, name string, chain [][]byte, key crypto.PrivateKey, sealer resources.Sealer) (api.IngressCertificate, error) {
	if len(chain) == 0 {
		return api.IngressCertificate{}, errors.New("no certificate")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("parse the leaf certificate: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("encode the private key: %w", err)
	}
	sealed, err := sealer.Seal(api.IngressCertificateSealPurpose(kind, name), der)
	clear(der)
	if err != nil {
		return api.IngressCertificate{}, fmt.Errorf("seal the private key: %w", err)
	}
	var chainPEM []byte
	for _, c := range chain {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	hosts := make([]string, 0, len(leaf.DNSNames))
	for _, h := range leaf.DNSNames {
		hosts = append(hosts, strings.ToLower(h))
	}
	slices.Sort(hosts)
	sum := sha256.Sum256(chain[0])
	return api.IngressCertificate{
		Kind: kind, Name: name, Hosts: slices.Compact(hosts), ChainPEM: chainPEM, SealedKey: sealed,
		Fingerprint: hex.EncodeToString(sum[:]), NotBefore: leaf.NotBefore.UTC(), NotAfter: leaf.NotAfter.UTC(),
	}, nil
}
