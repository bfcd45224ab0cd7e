package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/internal/filewatch"
)

// ServerTLS is the TLS configuration of a server whose certificate and key,
// and the CA bundle it verifies client certificates with, are files reloaded
// when they change: a renewed certificate or CA bundle takes effect on the
// next handshake, without a restart. A replacement that does not load (a
// half-written file, a key that does not match the certificate, bad PEM)
// keeps the last good one and is logged naming the file
// (internal/filewatch.Value).
type ServerTLS struct {
	files     ServerFiles
	cert      *filewatch.Value[*tls.Certificate]
	clientCAs *filewatch.Value[*x509.CertPool]
}

// ServerFiles says where a ServerTLS's files are and how it verifies
// clients.
type ServerFiles struct {
	// Leaf is the server's certificate (with any intermediates) and key.
	// Required.
	Leaf Paths
	// ClientCAFile is the CA bundle client certificates are verified with:
	// every certificate in it is trusted. Required.
	ClientCAFile string
	// ClientAuth is the tls.Config's ClientAuth. Default
	// tls.NoClientCert.
	ClientAuth tls.ClientAuthType
	// MinVersion is the lowest TLS version accepted. Default TLS 1.3.
	MinVersion uint16
	// Logger receives reloads and the files' errors.
	Logger zerolog.Logger
}

// NewServerTLS loads f's files and returns the configuration. It fails when
// a file does not load now. Run keeps the files watched.
func NewServerTLS(f ServerFiles) (*ServerTLS, error) {
	if f.MinVersion == 0 {
		f.MinVersion = tls.VersionTLS13
	}
	s := &ServerTLS{
		files: f,
		cert: filewatch.NewValue(filewatch.Config{Files: []string{f.Leaf.Cert, f.Leaf.Key}, Logger: f.Logger}, func(data [][]byte) (*tls.Certificate, error) {
			c, err := tls.X509KeyPair(data[0], data[1])
			if err != nil {
				return nil, fmt.Errorf("load key pair: %w", err)
			}
			return &c, nil
		}),
		clientCAs: filewatch.NewValue(filewatch.Config{Files: []string{f.ClientCAFile}, Logger: f.Logger}, func(data [][]byte) (*x509.CertPool, error) {
			return CertPool(data[0])
		}),
	}
	if _, err := s.cert.Get(); err != nil {
		return nil, err
	}
	if _, err := s.clientCAs.Get(); err != nil {
		return nil, err
	}
	return s, nil
}

// Config returns a server configuration that reads the current
// certificate and CA bundle at every handshake. It offers HTTP/2 and
// HTTP/1.1 by ALPN, as net/http's ServeTLS does for a static
// configuration.
func (s *ServerTLS) Config() *tls.Config {
	cfg := s.config(nil, nil)
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		// Neither Get fails after NewServerTLS: a bad change keeps the
		// last good value.
		cert, err := s.cert.Get()
		if err != nil {
			return nil, err
		}
		pool, err := s.clientCAs.Get()
		if err != nil {
			return nil, err
		}
		return s.config(cert, pool), nil
	}
	return cfg
}

func (s *ServerTLS) config(cert *tls.Certificate, pool *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		MinVersion: s.files.MinVersion, ClientAuth: s.files.ClientAuth, ClientCAs: pool,
		NextProtos: []string{"h2", "http/1.1"},
	}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// Err reports why a changed file is not in use (nil when the files in use
// are the files on disk).
func (s *ServerTLS) Err() error {
	if err := s.cert.Err(); err != nil {
		return err
	}
	return s.clientCAs.Err()
}

// Run watches the files, reloading them as they change, until ctx ends.
func (s *ServerTLS) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.cert.Run(gctx) })
	g.Go(func() error { return s.clientCAs.Run(gctx) })
	return g.Wait()
}
