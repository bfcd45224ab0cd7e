package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// runGetIngress prints every ingress route, or those of host.
func runGetIngress(ctx context.Context, c *apiclient.Client, g *globals, host string, f outputFormat, now time.Time) error {
	routes, err := c.ListIngress(ctx)
	if err != nil {
		return err
	}
	if host != "" {
		routes = filter(routes, func(r api.IngressRouteView) bool { return r.Host == host })
		if len(routes) == 0 {
			return fmt.Errorf("no ingress route for host %q", host)
		}
	}
	if f != formatTable {
		return printData(g.stdout, f, routes)
	}
	t := newTable(g.stdout, "HOST", "PATH", "WORKLOAD", "PORT", "BACKENDS", "TLS", "CERT EXPIRES", "STATUS", "AGE")
	for _, r := range routes {
		port := strconv.Itoa(r.Port)
		if r.PortName != "" {
			port = r.PortName + "/" + port
		}
		backends := fmt.Sprintf("%d/%d", r.Ready, r.Assigned)
		if r.Port == 0 && r.PortName == "" { // a rule in conflict: not routed
			port, backends = "-", "-"
		}
		tls, expires := "-", "-"
		switch {
		case r.TLS && r.TLSCertificate != "":
			tls = "file:" + r.TLSCertificate
		case r.TLS:
			tls = "acme"
		}
		switch {
		case !r.CertificateNotAfter.IsZero():
			expires = r.CertificateNotAfter.UTC().Format("2006-01-02 15:04")
		case r.CertificateError != "":
			expires = "error"
		case r.TLS:
			expires = "pending"
		}
		t.row(r.Host, r.Path, r.Workload, port, backends, tls, expires, r.Status, age(now, r.Since))
	}
	return t.flush()
}

// runGetCertificates prints every ingress certificate, or the one name
// ("KIND/NAME", or a NAME of either kind) says; never a key.
func runGetCertificates(ctx context.Context, c *apiclient.Client, g *globals, name string, f outputFormat, now time.Time) error {
	certs, err := c.ListIngressCertificates(ctx)
	if err != nil {
		return err
	}
	if name != "" {
		certs = filter(certs, func(v api.IngressCertificateView) bool { return v.Kind+"/"+v.Name == name || v.Name == name })
		if len(certs) == 0 {
			return fmt.Errorf("no ingress certificate %q", name)
		}
	}
	if f != formatTable {
		return printData(g.stdout, f, certs)
	}
	t := newTable(g.stdout, "CERTIFICATE", "HOSTS", "EXPIRES", "ROUTES", "ERROR")
	for _, v := range certs {
		expires := "-"
		if !v.NotAfter.IsZero() {
			expires = v.NotAfter.UTC().Format("2006-01-02 15:04")
		}
		routes := strings.Join(v.Routes, ", ")
		if routes == "" && !v.UnroutedSince.IsZero() {
			routes = "none since " + age(now, v.UnroutedSince) + " ago"
		}
		errText, _, _ := strings.Cut(v.LastError, "\n")
		t.row(v.Kind+"/"+v.Name, orDash(strings.Join(v.Hosts, ",")), expires, orDash(routes), orDash(errText))
	}
	return t.flush()
}

// deleteCertificate deletes the ingress certificate ref names
// ("KIND/NAME").
func deleteCertificate(ctx context.Context, c *apiclient.Client, g *globals, ref string, force bool) error {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || kind == "" || name == "" {
		return fmt.Errorf("certificate %q: want KIND/NAME (file/NAME or acme/HOST, as katcall get certificates lists them)", ref)
	}
	if err := c.DeleteIngressCertificate(ctx, kind, name, force); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "certificate %s/%s deleted\n", kind, name)
	return nil
}
