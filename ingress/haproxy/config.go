package haproxy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"text/template"
	"time"
)

// RunDir is where the proxy container sees its run directory: the
// configuration, the maps and the sockets.
const RunDir = "/run/kat-ingress"

// The files of the run directory. The runtime API names a map by the path
// the configuration loaded it from: the directory as HAProxy sees it.
const (
	ConfigFile = "haproxy.cfg"
	AdminSock  = "admin.sock"
	MasterSock = "master.sock"
	ExactMap   = "exact.map"
	PrefixMap  = "prefix.map"
	// TLSMap lists the hosts whose plain HTTP requests are redirected to
	// HTTPS: those whose certificate is loaded.
	TLSMap = "tls.map"
	// ACMEMap holds the answers of ACME HTTP-01 challenges, by token.
	ACMEMap = "acme.map"
	// CertList is the crt-list of the HTTPS bind: the certificates
	// selected by SNI, filled at run time.
	CertList = "certs.list"
	// DefaultCert is the certificate served for an unknown SNI: made once
	// per node, its key protects nothing.
	DefaultCert = "default.pem"
)

// DefaultSlots is the number of backends of the pool a proxy starts with:
// one per workload and port that some route names. The pool doubles when
// it is full (Grow).
const DefaultSlots = 64

// SlotsFor is the size of a pool that holds backends: DefaultSlots,
// doubled as often as needed.
func SlotsFor(backends int) int {
	n := DefaultSlots
	for n < backends {
		n *= 2
	}
	return n
}

// Config is what the static configuration depends on.
type Config struct {
	// Dir is the run directory as HAProxy sees it. Default RunDir.
	Dir string
	// HTTPPort is the container port HAProxy serves HTTP on (the port named
	// http of the proxy's VirtualLoadBalancer).
	HTTPPort int
	// HTTPSPort is the container port HAProxy serves HTTPS on (the port
	// named https); 0 serves no HTTPS.
	HTTPSPort int
	// Slots is the size of the backend pool. Default DefaultSlots.
	Slots int
	// Servers are the pool's servers when the proxy starts, by slot and
	// name (see Starting); servers in maintenance are left out.
	Servers map[string]map[string]Server
}

// SlotName is the name of backend i of the pool.
func SlotName(i int) string { return fmt.Sprintf("kat_b%03d", i) }

var configTemplate = template.Must(template.New("haproxy.cfg").Parse(`# Written by the KAT agent; routes and servers change at run time, not here.
global
    master-worker
    stats socket {{.RunDir}}/admin.sock mode 600 level admin expose-fd listeners
    stats timeout 10s
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlognull
    option forwardfor
    option redispatch 1
    retries 3
    retry-on conn-failure empty-response
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 10s
    timeout tunnel 1h

frontend kat_http
    bind :{{.HTTPPort}}
{{- if .HTTPSPort}}
    bind :{{.HTTPSPort}} ssl crt {{.RunDir}}/{{.DefaultCert}} crt-list {{.RunDir}}/{{.CertList}} alpn h2,http/1.1
{{- end}}
    http-request set-var(txn.host) req.hdr(host),host_only,lower
    http-request set-var(txn.path) path
    http-request set-var(txn.key) var(txn.host),concat(,txn.path)
    http-request set-var(txn.wkey) var(txn.host),regsub(^[^.]+,*),concat(,txn.path)
    http-request return status 200 content-type text/plain lf-string "%[path,field(4,/),map({{.ACME}})]" if { path_beg /.well-known/acme-challenge/ } { path,field(4,/),map({{.ACME}}) -m found }
    http-request redirect scheme https code 308 if !{ ssl_fc } { var(txn.host),map_str({{.TLS}}) -m found }
    http-request set-header X-Forwarded-Proto https if { ssl_fc }
    http-request set-header X-Forwarded-Proto http if !{ ssl_fc }
    use_backend %[var(txn.key),map_str({{.Exact}})] if { var(txn.key),map_str({{.Exact}}) -m found }
    use_backend %[var(txn.key),map_beg({{.Prefix}})] if { var(txn.key),map_beg({{.Prefix}}) -m found }
    use_backend %[var(txn.wkey),map_str({{.Exact}})] if { var(txn.wkey),map_str({{.Exact}}) -m found }
    use_backend %[var(txn.wkey),map_beg({{.Prefix}})] if { var(txn.wkey),map_beg({{.Prefix}}) -m found }
    default_backend kat_none

backend kat_none
    http-request return status 404 content-type text/plain string "no ingress route for this host and path\n"
`))

// Pool returns the configuration of the pool's backends from to to-1:
// Render ends with the pool's first slots, and Grow appends more.
func Pool(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "\nbackend %s\n    balance roundrobin\n", SlotName(i))
	}
	return b.Bytes()
}

// Render returns the static configuration.
func Render(c Config) ([]byte, error) {
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		return nil, fmt.Errorf("render haproxy.cfg: http port %d is not a port", c.HTTPPort)
	}
	if c.HTTPSPort < 0 || c.HTTPSPort > 65535 || c.HTTPSPort == c.HTTPPort {
		return nil, fmt.Errorf("render haproxy.cfg: https port %d is not a port other than the http port", c.HTTPSPort)
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.Dir == "" {
		c.Dir = RunDir
	}
	var b bytes.Buffer
	err := configTemplate.Execute(&b, map[string]any{
		"RunDir": c.Dir, "HTTPPort": c.HTTPPort, "Exact": c.Dir + "/" + ExactMap, "Prefix": c.Dir + "/" + PrefixMap,
		"HTTPSPort": c.HTTPSPort, "DefaultCert": DefaultCert, "CertList": CertList,
		"TLS": c.Dir + "/" + TLSMap, "ACME": c.Dir + "/" + ACMEMap,
	})
	if err != nil {
		return nil, fmt.Errorf("render haproxy.cfg: %w", err)
	}
	b.Write(poolWithServers(c.Slots, c.Servers))
	return b.Bytes(), nil
}

// RunFiles returns every file of a new run directory for a proxy that
// starts routing routes: the configuration with the pool's servers, the
// map files with their entries (Starting), empty TLS and ACME maps and,
// with HTTPS, the empty crt-list and a fresh self-signed default
// certificate (its key protects nothing: it is served only for a host
// without a certificate of its own). The pool is c.Slots backends, or by
// default as many as routes needs (SlotsFor). A proxy so started answers
// its first request with the routes, not with 404 until an updater has
// filled it; the updater then finds nothing to change.
func RunFiles(c Config, routes Desired) (map[string][]byte, error) {
	if c.Slots <= 0 {
		c.Slots = SlotsFor(len(routes.Backends))
	}
	start := Starting(routes, c.Slots)
	c.Servers = start.Servers
	cfg, err := Render(c)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{ConfigFile: cfg, ExactMap: mapFile(start.Exact), PrefixMap: mapFile(start.Prefix), TLSMap: nil, ACMEMap: nil}
	if c.HTTPSPort != 0 {
		pem, err := selfSigned("kat-ingress-default")
		if err != nil {
			return nil, err
		}
		files[CertList], files[DefaultCert] = nil, pem
	}
	return files, nil
}

// selfSigned returns a self-signed ECDSA certificate for cn and its key,
// PEM, valid ten years.
func selfSigned(cn string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make the default certificate's key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("make the default certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make the default certificate: %w", err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode the default certificate's key: %w", err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...), nil
}
