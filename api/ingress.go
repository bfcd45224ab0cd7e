package api

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// IngressRoutes is the key /kat/ingress/routes/{ns}/{workload}
// (docs/architecture.md "Ingress"): the routes the leader's ingress loop
// derived from one workload's VirtualLoadBalancer spec.ingress and its
// ready instances. That loop is its only writer; the agent of every node
// running the ingress proxy reads it and applies it to its proxy.
type IngressRoutes struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Rules are the rules this workload holds, sorted by host, then path.
	Rules []IngressRule `json:"rules,omitempty"`
	// Conflicts are the rules of its spec that another workload holds:
	// not routed. Sorted like Rules.
	Conflicts []IngressConflict `json:"conflicts,omitempty"`
}

// IngressRule routes one host and path prefix to a workload's ready
// instances.
type IngressRule struct {
	// Host is lowercase; "*.example.com" matches one more label.
	Host string `json:"host"`
	// Path is "/" or "/a/b" (no trailing slash): it matches the path
	// itself and everything under "path/".
	Path string `json:"path"`
	// Field is where the rule is written ("spec.ingress[1]"), for
	// messages.
	Field string `json:"field"`
	// Port and PortName are the port the current spec names; each backend
	// carries its own port (an old instance's spec may number it
	// otherwise).
	Port     int    `json:"port"`
	PortName string `json:"portName,omitempty"`
	// TLS is the rule's spec.ingress[].tls.
	TLS bool `json:"tls,omitempty"`
	// TLSCertificate is its spec.ingress[].tlsCertificate: the certificate
	// from files of that name; "" with TLS is ACME's for Host.
	TLSCertificate string `json:"tlsCertificate,omitempty"`
	// Certificate is the fingerprint (IngressCertificate.Fingerprint) of
	// the certificate the proxies serve for Host; "" while there is none,
	// and then the host is served over plain HTTP without a redirect.
	Certificate string `json:"certificate,omitempty"`
	// Since is when this workload began to hold Host and Path: of two
	// workloads claiming them, the earlier holder keeps them.
	Since time.Time `json:"since"`
	// Backends are the ready instances, sorted by instance ID.
	Backends []IngressBackend `json:"backends,omitempty"`
}

// Backend is the name of the proxy backend of the rule: one per workload
// and port, shared by the workload's rules on that port.
func (r IngressRule) Backend(ns, workload string) string {
	port := r.PortName
	if port == "" {
		port = strconv.Itoa(r.Port)
	}
	return ns + "/" + workload + ":" + port
}

// IngressBackend is one ready instance behind a rule.
type IngressBackend struct {
	InstanceID string `json:"instanceID"`
	Node       string `json:"node"`
	// Addr is the instance's overlay address and the port its own spec
	// gives the rule's port.
	Addr netip.AddrPort `json:"addr"`
}

// IngressConflict is a rule of a workload's spec that another workload
// holds.
type IngressConflict struct {
	Host  string `json:"host"`
	Path  string `json:"path"`
	Field string `json:"field"`
	// HeldBy is "ns/name" of the holder.
	HeldBy string `json:"heldBy"`
	// Since is when the holder began to hold it.
	Since time.Time `json:"since"`
}

// Equal reports whether two records say the same.
func (r IngressRoutes) Equal(o IngressRoutes) bool {
	return r.Namespace == o.Namespace && r.Workload == o.Workload &&
		slices.EqualFunc(r.Rules, o.Rules, func(a, b IngressRule) bool {
			return a.Host == b.Host && a.Path == b.Path && a.Field == b.Field && a.Port == b.Port && a.PortName == b.PortName &&
				a.TLS == b.TLS && a.TLSCertificate == b.TLSCertificate && a.Certificate == b.Certificate && a.Since.Equal(b.Since) && slices.Equal(a.Backends, b.Backends)
		}) &&
		slices.EqualFunc(r.Conflicts, o.Conflicts, func(a, b IngressConflict) bool {
			return a.Host == b.Host && a.Path == b.Path && a.Field == b.Field && a.HeldBy == b.HeldBy && a.Since.Equal(b.Since)
		})
}

// IngressRouteView is one row of GET /v1alpha1/ingress (katcall get
// ingress): a host and path, who serves it, its backends.
type IngressRouteView struct {
	Host     string `json:"host"`
	Path     string `json:"path"`
	Workload string `json:"workload"` // "ns/name"
	Field    string `json:"field"`
	Port     int    `json:"port"`
	PortName string `json:"portName,omitempty"`
	TLS      bool   `json:"tls,omitempty"`
	// Ready is the number of ready backends, Assigned the workload's
	// instances.
	Ready    int              `json:"ready"`
	Assigned int              `json:"assigned"`
	Backends []IngressBackend `json:"backends,omitempty"`
	// TLSCertificate is the rule's tlsCertificate ("" with TLS: ACME).
	TLSCertificate string `json:"tlsCertificate,omitempty"`
	// CertificateNotAfter is when the certificate served for Host
	// expires; zero while none is.
	CertificateNotAfter time.Time `json:"certificateNotAfter,omitzero"`
	// CertificateError is the last failure to import, issue or renew the
	// certificate (names and reasons, never key material).
	CertificateError string `json:"certificateError,omitempty"`
	// Status is IngressRouted, IngressNoBackends,
	// IngressCertificatePending, IngressCertificateMissing or
	// "Conflict: ns/name" (the holder).
	Status string `json:"status"`
	// Since is when the workload began to hold the route; for a conflict,
	// when the holder did.
	Since time.Time `json:"since"`
}

// The statuses of IngressRouteView.
const (
	IngressRouted     = "Routed"
	IngressNoBackends = "NoBackends"
	// IngressCertificatePending: TLS asked, and the leader has not yet
	// read the rule's certificate pair from its directory.
	IngressCertificatePending = "CertificatePending"
	// IngressCertificateMissing: TLS asked, and there is no certificate:
	// the pair is missing or does not load, or ACME has not issued one
	// (CertificateError says why).
	IngressCertificateMissing = "CertificateMissing"
)

// Reasons of the ingress events: the leader's ingress loop records a route
// a workload began or stopped to serve and a rule not routed because
// another workload holds it; a node's agent records its proxy's errors.
const (
	ReasonIngressRouteAdded   = "IngressRouteAdded"
	ReasonIngressRouteRemoved = "IngressRouteRemoved"
	ReasonIngressConflict     = "IngressConflict"
	ReasonIngressProxyError   = "IngressProxyError"
	// ReasonCertificateRemoved: the leader deleted an ACME certificate
	// whose host had not been routed for the grace period.
	ReasonCertificateRemoved = "CertificateRemoved"
)

// IngressProxyStatus is NodeStatus.Ingress: what the node's ingress proxy
// has applied. Nil on a node without a proxy instance.
type IngressProxyStatus struct {
	// Proxy is the proxy and its version ("HAProxy 2.6.12").
	Proxy string `json:"proxy"`
	// Routes and Backends are what it routes now.
	Routes   int `json:"routes"`
	Backends int `json:"backends"`
	// Certificates is the number of certificates it serves.
	Certificates int `json:"certificates,omitempty"`
	// ACMETokens are the tokens of the ACME HTTP-01 challenges it answers,
	// sorted, separated by spaces (a string keeps the status comparable):
	// the leader accepts a challenge once every proxy answers it.
	ACMETokens string `json:"acmeTokens,omitempty"`
	// LastError is the last failed change (a command and the proxy's
	// answer), cut to 300 bytes; "" after a pass that applied everything.
	LastError     string    `json:"lastError,omitempty"`
	LastAppliedAt time.Time `json:"lastAppliedAt,omitzero"`
}

// TLSSource is where the certificate of a rule with TLS comes from:
// ("file", TLSCertificate) or ("acme", Host); it is the key of the
// certificate's record (IngressCertificate) and of its delivery to the
// proxies.
func (r IngressRule) TLSSource() (kind, name string) {
	if r.TLSCertificate != "" {
		return CertificateFile, r.TLSCertificate
	}
	return CertificateACME, r.Host
}

// The kinds of ingress certificates.
const (
	CertificateFile = "file"
	CertificateACME = "acme"
)

// IngressCertificate is the record /kat/ingress/certs/{kind}/{name}: a
// certificate the ingress proxies serve, from the etcd members' certificate
// directory (kind "file", name NAME) or from ACME (kind "acme", name the
// host). Its key is sealed with the cluster CA (only etcd members open it);
// workers may not read these keys. Written by the leader only.
type IngressCertificate struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Hosts are the leaf's DNS names.
	Hosts []string `json:"hosts,omitempty"`
	// ChainPEM is the chain, leaf first: public.
	ChainPEM []byte `json:"chainPEM,omitempty"`
	// SealedKey is the private key (PKCS#8 DER) sealed for
	// IngressCertificateSealPurpose(Kind, Name).
	SealedKey []byte `json:"sealedKey,omitempty"`
	// Fingerprint is the SHA-256 of the leaf's DER, hex; "" while the
	// record holds no certificate (only an error).
	Fingerprint string    `json:"fingerprint,omitempty"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	NotAfter    time.Time `json:"notAfter,omitzero"`
	// RenewAt is when ACME renews it (2/3 of its lifetime).
	RenewAt time.Time `json:"renewAt,omitzero"`
	// LastError is the last failed import, issue or renewal (names and
	// reasons only); the certificate above, if any, stays served.
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// NextTryAt is when ACME tries again after a failure (back-off).
	NextTryAt time.Time `json:"nextTryAt,omitzero"`
	// Failures counts the failures in a row (the back-off's exponent).
	Failures int `json:"failures,omitempty"`
	// UnroutedSince is when the ACME loop found the host of an ACME
	// certificate no longer routed with tls; the record is deleted
	// ACMEConfig.UnroutedGrace later unless the host is routed again.
	UnroutedSince time.Time `json:"unroutedSince,omitzero"`
}

// Covers reports whether the certificate's names include host: the same
// name, or a wildcard "*.rest" for a host of one more label than rest.
func (c IngressCertificate) Covers(host string) bool {
	for _, h := range c.Hosts {
		if h == host {
			return true
		}
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			if label, tail, found := strings.Cut(host, "."); found && label != "" && tail == rest {
				return true
			}
		}
	}
	return false
}

// IngressCertificateView is one row of GET /v1alpha1/ingress/certificates
// (katcall get certificates): a certificate record without its chain or
// key, and the rules that use it.
type IngressCertificateView struct {
	IngressCertificate
	// ChainPEM and SealedKey hide the record's: never in a view.
	ChainPEM  struct{} `json:"-"`
	SealedKey struct{} `json:"-"`
	// Routes are the held rules served with it ("host/path ns/name"),
	// sorted.
	Routes []string `json:"routes,omitempty"`
}

// IngressCertificateSealPurpose is what a certificate's key is sealed
// for: a sealed key moved to another record does not open.
func IngressCertificateSealPurpose(kind, name string) string {
	return "ingress-certificate " + kind + "/" + name
}

// IngressCertificateBundle is the answer of GET
// /v1alpha1/nodes/{node}/ingress/certificates/{kind}/{name} to a node that
// runs an ingress proxy instance: the one record that carries the key.
type IngressCertificateBundle struct {
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
	ChainPEM    []byte `json:"chainPEM"`
	// KeyPEM is the private key, PEM (PKCS#8).
	KeyPEM []byte `json:"keyPEM"`
}

// ACMEAccount is the record /kat/ingress/acme/account: the leader's account
// with the ACME directory. Its key is sealed like certificates' keys.
type ACMEAccount struct {
	Directory string `json:"directory"`
	URI       string `json:"uri"`
	Email     string `json:"email,omitempty"`
	SealedKey []byte `json:"sealedKey"`
}

// ACMEAccountSealPurpose is what the ACME account key is sealed for.
const ACMEAccountSealPurpose = "acme-account"

// ACMEChallenge is the record /kat/ingress/challenges/{token}: an HTTP-01
// answer every ingress proxy serves at
// /.well-known/acme-challenge/{token}. Public: the CA fetches it over
// plain HTTP.
type ACMEChallenge struct {
	Token            string    `json:"token"`
	KeyAuthorization string    `json:"keyAuthorization"`
	Host             string    `json:"host"`
	Expires          time.Time `json:"expires"`
}
