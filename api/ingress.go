package api

import (
	"net/netip"
	"slices"
	"strconv"
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
				a.TLS == b.TLS && a.Since.Equal(b.Since) && slices.Equal(a.Backends, b.Backends)
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
	// Status is "Routed", "NoBackends" or "Conflict: ns/name" (the holder).
	Status string `json:"status"`
	// Since is when the workload began to hold the route; for a conflict,
	// when the holder did.
	Since time.Time `json:"since"`
}

// Reasons of the ingress events: the leader's ingress loop records a route
// a workload began or stopped to serve and a rule not routed because
// another workload holds it; a node's agent records its proxy's errors.
const (
	ReasonIngressRouteAdded   = "IngressRouteAdded"
	ReasonIngressRouteRemoved = "IngressRouteRemoved"
	ReasonIngressConflict     = "IngressConflict"
	ReasonIngressProxyError   = "IngressProxyError"
)

// IngressProxyStatus is NodeStatus.Ingress: what the node's ingress proxy
// has applied. Nil on a node without a proxy instance.
type IngressProxyStatus struct {
	// Proxy is the proxy and its version ("HAProxy 2.6.12").
	Proxy string `json:"proxy"`
	// Routes and Backends are what it routes now.
	Routes   int `json:"routes"`
	Backends int `json:"backends"`
	// LastError is the last failed change (a command and the proxy's
	// answer), cut to 300 bytes; "" after a pass that applied everything.
	LastError     string    `json:"lastError,omitempty"`
	LastAppliedAt time.Time `json:"lastAppliedAt,omitzero"`
}
