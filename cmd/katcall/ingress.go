package main

import (
	"context"
	"fmt"
	"strconv"
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
