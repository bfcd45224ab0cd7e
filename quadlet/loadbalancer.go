package quadlet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// VirtualLoadBalancer is the optional network file of a Service
// (conventionally VirtualLoadBalancer.kat): the ports to balance, a health
// check and ingress hints.
type VirtualLoadBalancer struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindVirtualLoadBalancer.
	Kind string `json:"kind" yaml:"kind"`
	// Spec is required.
	Spec VirtualLoadBalancerSpec `json:"spec" yaml:"spec"`
}

// VirtualLoadBalancerSpec is the content of a VirtualLoadBalancer.
type VirtualLoadBalancerSpec struct {
	// Ports is required and not empty: the ports the container serves.
	Ports []Port `json:"ports" yaml:"ports"`
	// HealthCheck decides readiness. Default nil: a running container is
	// healthy.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty" yaml:"healthCheck,omitempty"`
	// Ingress are hints for an external ingress controller. Default none.
	Ingress []Ingress `json:"ingress,omitempty" yaml:"ingress,omitempty"`
}

// Port is a port the container listens on.
type Port struct {
	// Name is an optional DNS label, unique among the ports, that ingress
	// rules can refer to. Default none.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// ContainerPort is required: 1 to 65535. Together with Protocol it is
	// unique among the ports.
	ContainerPort int `json:"containerPort" yaml:"containerPort"`
	// Protocol is "TCP" (the default) or "UDP".
	Protocol string `json:"protocol" yaml:"protocol"`
}

// HealthCheck runs a command in the container to decide whether it is
// healthy.
type HealthCheck struct {
	// Exec is required: the command to run.
	Exec ExecAction `json:"exec" yaml:"exec"`
	// InitialDelaySeconds is the wait before the first check (>= 0).
	// Default 0.
	InitialDelaySeconds int `json:"initialDelaySeconds" yaml:"initialDelaySeconds"`
	// PeriodSeconds is the interval between checks (>= 1). Default 10.
	PeriodSeconds int `json:"periodSeconds" yaml:"periodSeconds"`
	// TimeoutSeconds bounds one check (>= 1). Default 1.
	TimeoutSeconds int `json:"timeoutSeconds" yaml:"timeoutSeconds"`
	// SuccessThreshold is the number of consecutive successes that make an
	// instance healthy (>= 1). Default 1.
	SuccessThreshold int `json:"successThreshold" yaml:"successThreshold"`
	// FailureThreshold is the number of consecutive failures that make an
	// instance unhealthy (>= 1). Default 3.
	FailureThreshold int `json:"failureThreshold" yaml:"failureThreshold"`
}

// ExecAction is a command run inside the container; exit status 0 means
// healthy.
type ExecAction struct {
	// Command is required and not empty.
	Command []string `json:"command" yaml:"command"`
}

// Ingress is a hint for an external ingress controller.
type Ingress struct {
	// Host is required: the external host name, optionally starting with
	// "*." for a wildcard.
	Host string `json:"host" yaml:"host"`
	// Path is a path prefix starting with "/". Default "/".
	Path string `json:"path" yaml:"path"`
	// ServicePortName names a port of Spec.Ports. One of ServicePortName
	// and ServicePort is required.
	ServicePortName string `json:"servicePortName,omitempty" yaml:"servicePortName,omitempty"`
	// ServicePort is a containerPort of Spec.Ports; it overrides
	// ServicePortName. Default none.
	ServicePort int `json:"servicePort,omitempty" yaml:"servicePort,omitempty"`
	// TLS serves the host over HTTPS (and redirects its HTTP requests
	// there) with a certificate from ACME, or the one TLSCertificate
	// names. Default false.
	TLS bool `json:"tls,omitempty" yaml:"tls,omitempty"`
	// TLSCertificate names a certificate pair NAME.crt and NAME.key in the
	// cluster's ingress certificate directory (a DNS label); it needs TLS.
	// Default none: ACME.
	TLSCertificate string `json:"tlsCertificate,omitempty" yaml:"tlsCertificate,omitempty"`
}

func validateLoadBalancer(c *checker, lb *VirtualLoadBalancer) {
	c.checkHeader(KindVirtualLoadBalancer)
	s := &lb.Spec
	if !c.required("spec") {
		return
	}
	if len(s.Ports) == 0 && !c.failed("spec.ports") {
		c.errorf("spec.ports", "must list at least one port")
	}
	names := map[string]bool{}
	type portKey struct {
		port  int
		proto string
	}
	seen := map[portKey]bool{}
	numbers := map[int]bool{}
	udpNames, udpNumbers, tcpNumbers := map[string]bool{}, map[int]bool{}, map[int]bool{}
	for i, port := range s.Ports {
		p := fmt.Sprintf("spec.ports[%d]", i)
		if port.Name != "" {
			c.check(p+".name", port.Name, dnsLabel)
			if names[port.Name] {
				c.errorf(p+".name", "port name %q is used more than once", port.Name)
			}
			names[port.Name] = true
		}
		if c.required(p+".containerPort") && portNumber(port.ContainerPort) != "" {
			c.errorf(p+".containerPort", "%s", portNumber(port.ContainerPort))
		}
		if c.oneOf(p+".protocol", port.Protocol, "TCP", "UDP") {
			k := portKey{port.ContainerPort, port.Protocol}
			if seen[k] {
				c.errorf(p+".containerPort", "port %d/%s is listed more than once", port.ContainerPort, port.Protocol)
			}
			seen[k] = true
		}
		numbers[port.ContainerPort] = true
		if port.Protocol == "UDP" {
			udpNumbers[port.ContainerPort] = true
			if port.Name != "" {
				udpNames[port.Name] = true
			}
		} else {
			tcpNumbers[port.ContainerPort] = true
		}
	}
	if h := s.HealthCheck; h != nil {
		const p = "spec.healthCheck"
		if c.required(p+".exec") && len(h.Exec.Command) == 0 {
			c.errorf(p+".exec.command", "must name a command to run")
		}
		c.atLeast(p+".initialDelaySeconds", h.InitialDelaySeconds, 0)
		c.atLeast(p+".periodSeconds", h.PeriodSeconds, 1)
		c.atLeast(p+".timeoutSeconds", h.TimeoutSeconds, 1)
		c.atLeast(p+".successThreshold", h.SuccessThreshold, 1)
		c.atLeast(p+".failureThreshold", h.FailureThreshold, 1)
	}
	type route struct{ host, path string }
	routes := map[route]bool{}
	for i, in := range s.Ingress {
		p := fmt.Sprintf("spec.ingress[%d]", i)
		if c.required(p + ".host") {
			c.check(p+".host", in.Host, hostName)
		}
		if msg := ingressPath(in.Path); msg != "" {
			c.errorf(p+".path", "%s", msg)
		}
		if in.TLSCertificate != "" {
			c.check(p+".tlsCertificate", in.TLSCertificate, dnsLabel)
			if !in.TLS {
				c.errorf(p+".tlsCertificate", "names a certificate, but tls is not true; set tls: true to serve the host over HTTPS")
			}
		}
		if in.TLS && in.TLSCertificate == "" && strings.HasPrefix(in.Host, "*.") {
			c.errorf(p+".tls", "a wildcard host needs a certificate from a file (tlsCertificate): ACME here proves hosts by HTTP-01, which cannot issue wildcards")
		}
		r := route{in.Host, in.Path}
		if routes[r] {
			c.errorf(p, "host %q and path %q are listed more than once", in.Host, in.Path)
		}
		routes[r] = true
		if in.ServicePortName != "" && udpNames[in.ServicePortName] || c.has(p+".servicePort") && udpNumbers[in.ServicePort] && !tcpNumbers[in.ServicePort] {
			c.errorf(p, "routes HTTP to a UDP port; name a TCP port of spec.ports")
		}
		if in.ServicePortName != "" && !names[in.ServicePortName] {
			c.errorf(p+".servicePortName", "port %q is not defined in spec.ports", in.ServicePortName)
		}
		if c.has(p+".servicePort") && !numbers[in.ServicePort] {
			c.errorf(p+".servicePort", "port %d is not defined in spec.ports", in.ServicePort)
		}
		if in.ServicePortName == "" && !c.has(p+".servicePort") && len(s.Ports) > 0 {
			c.errorf(p, "set servicePortName or servicePort to pick a port from spec.ports")
		}
	}
}

// ingressPath checks the path of an ingress rule: a prefix that matches
// itself and everything under it, so it is written without a trailing
// slash. It returns why path is refused, or "".
func ingressPath(path string) string {
	const hint = `write "/api": it matches /api and everything under /api/`
	switch {
	case !strings.HasPrefix(path, "/"):
		return fmt.Sprintf("%q must start with \"/\"", path)
	case strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Sprintf("%q must not contain spaces or control characters", path)
	case strings.ContainsAny(path, "?#%"):
		return fmt.Sprintf("%q must not contain \"?\", \"#\" or \"%%\": it is a path prefix, matched before any query", path)
	case path != "/" && strings.HasSuffix(path, "/"):
		return fmt.Sprintf("%q must not end in \"/\"; %s", path, hint)
	case strings.Contains(path, "//") || strings.Contains(path+"/", "/./") || strings.Contains(path+"/", "/../"):
		return fmt.Sprintf("%q must not contain empty, \".\" or \"..\" segments", path)
	}
	return ""
}

// LabelIngressProxy is the label of metadata.labels that makes a workload
// the cluster's ingress proxy: the agent configures its instances from the
// routes of every spec.ingress. Its value names the proxy; "haproxy" is the
// only one.
const LabelIngressProxy = "kat.dws.rip/ingress-proxy"

// IngressProxyHAProxy is the value of LabelIngressProxy for HAProxy.
const IngressProxyHAProxy = "haproxy"

// checkIngressProxy checks a workload labelled LabelIngressProxy with
// value v: a DaemonService with a VirtualLoadBalancer port named http.
func checkIngressProxy(q *Quadlet, wc *checker, v string) {
	field := "metadata.labels[" + strconv.Quote(LabelIngressProxy) + "]"
	if v != IngressProxyHAProxy {
		wc.errorf(field, "%q is not a known ingress proxy; the only one is %q", v, IngressProxyHAProxy)
		return
	}
	if q.Workload.Spec.Type != TypeDaemonService {
		wc.errorf(field, "an ingress proxy must be a DaemonService (one per ingress node), and this workload is a %s", q.Workload.Spec.Type)
		return
	}
	if q.LoadBalancer == nil || !slices.ContainsFunc(q.LoadBalancer.Spec.Ports, func(p Port) bool { return p.Name == "http" && p.Protocol == "TCP" }) {
		wc.errorf(field, "an ingress proxy needs a VirtualLoadBalancer with a TCP port named http (and optionally https)")
	}
}
