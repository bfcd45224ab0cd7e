package node

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"kat.dws.rip/kat/reconcile/leader"
)

// ingressCertDir is the directory the leader imports ingress certificate
// pairs from (--ingress-cert-dir, default DATA_DIR/ingress/certs). The
// default directory is made (0700) so that the leader's watch of it holds
// from the start; a chosen one is the operator's to make.
func (n *Node) ingressCertDir() string {
	if n.opts.IngressCertDir != "" {
		return n.opts.IngressCertDir
	}
	dir := n.dir.path("ingress", "certs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		n.log.Warn().Err(err).Str("dir", dir).Msg("cannot make the ingress certificate directory; watching for it")
	}
	return dir
}

// acmeConfig is the leader's ACME client configuration, trusting
// --acme-ca-file beside the system's roots.
func (n *Node) acmeConfig() (leader.ACMEConfig, error) {
	o := n.opts.ACME
	if o.Directory == "" {
		return leader.ACMEConfig{}, nil
	}
	cfg := leader.ACMEConfig{Directory: o.Directory, Email: o.Email, UnroutedGrace: o.UnroutedGrace}
	if o.CAFile == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(o.CAFile)
	if err != nil {
		return cfg, fmt.Errorf("--acme-ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return cfg, fmt.Errorf("--acme-ca-file: %s holds no PEM certificate", o.CAFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	cfg.HTTPClient = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return cfg, nil
}
