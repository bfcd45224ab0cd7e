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
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// DefaultCertScan is how often the leader reads the ingress certificate
// directory again (Config.CertScan).
const DefaultCertScan = 5 * time.Second

// certFiles imports the certificate pairs of the ingress certificate
// directory (Config.IngressCertDir: NAME.crt, the chain in PEM, leaf first,
// and NAME.key, a PEM private key) into sealed records
// /kat/ingress/certs/file/NAME, at the start of each term and every
// CertScan. A pair that does not load keeps the last good certificate and
// records why (naming the file, never its content); a pair older than the
// stored one (a stale copy on another member) is not imported; a pair that
// disappears deletes nothing.
func (l *Leader) certFiles(ctx context.Context) error {
	if err := l.view.waitSynced(ctx); err != nil {
		return nil
	}
	t := time.NewTicker(l.cfg.CertScan)
	defer t.Stop()
	for {
		if err := l.importCertFiles(ctx); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn().Str("component", "ingress-certs").Err(err).Msg("certificate import failed; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// importCertFiles reads the directory once.
func (l *Leader) importCertFiles(ctx context.Context) error {
	dir := l.cfg.IngressCertDir
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the ingress certificate directory %s: %w", dir, err)
	}
	log := l.cfg.Logger.With().Str("component", "ingress-certs").Logger()
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".crt")
		if !ok || e.IsDir() || !quadlet.IsDNSLabel(name) {
			continue
		}
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
