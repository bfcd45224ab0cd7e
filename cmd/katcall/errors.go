package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"kat.dws.rip/kat/api"
)

// describe turns an error into one clear line (plus, for a refused Quadlet,
// one line per invalid field) instead of a chain of wrapped errors.
func describe(err error) string {
	var apiErr *api.Error
	if errors.As(err, &apiErr) {
		switch apiErr.StatusCode {
		case http.StatusUnauthorized:
			return "authentication failed: " + apiErr.Message + " (check the token in your katcall configuration)"
		case http.StatusUnprocessableEntity:
			if len(apiErr.Details) > 0 {
				lines := []string{"the API refused the Quadlet:"}
				for _, d := range apiErr.Details {
					lines = append(lines, "  "+fieldLine(d))
				}
				return strings.Join(lines, "\n")
			}
		}
		return apiErr.Message
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		host := uerr.URL
		if u, perr := url.Parse(uerr.URL); perr == nil {
			host = u.Scheme + "://" + u.Host
		}
		var unknownAuth x509.UnknownAuthorityError
		var hostErr x509.HostnameError
		var certErr *x509.CertificateInvalidError
		switch {
		case errors.As(err, &unknownAuth):
			return fmt.Sprintf("cannot verify the KAT API at %s: its certificate is not signed by the CA in your katcall configuration", host)
		case errors.As(err, &hostErr):
			return fmt.Sprintf("cannot verify the KAT API at %s: %v", host, hostErr)
		case errors.As(err, &certErr):
			return fmt.Sprintf("cannot verify the KAT API at %s: %v", host, certErr)
		case errors.Is(err, syscall.ECONNREFUSED):
			return fmt.Sprintf("cannot reach the KAT API at %s: connection refused (is kat-agent running?)", host)
		case uerr.Timeout():
			return fmt.Sprintf("cannot reach the KAT API at %s: timed out", host)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return fmt.Sprintf("cannot reach the KAT API at %s: unknown host %s", host, dnsErr.Name)
		}
		var opErr *net.OpError
		if errors.As(err, &opErr) {
			return fmt.Sprintf("cannot reach the KAT API at %s: %v", host, opErr.Err)
		}
		return fmt.Sprintf("cannot reach the KAT API at %s: %v", host, innermost(err))
	}
	return err.Error()
}

func fieldLine(d api.FieldDetail) string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			fmt.Fprintf(&b, ":%d", d.Line)
		}
		b.WriteString(": ")
	}
	if d.Field != "" {
		b.WriteString(d.Field + ": ")
	}
	b.WriteString(d.Message)
	return b.String()
}

func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
