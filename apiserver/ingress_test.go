package apiserver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

func TestIngressViews(t *testing.T) {
	since := time.Unix(1000, 0).UTC()
	be := api.IngressBackend{InstanceID: "web-1", Node: "n1", Addr: netip.MustParseAddrPort("10.0.0.2:8080")}
	routes := []api.IngressRoutes{
		{Namespace: "d", Workload: "web", Rules: []api.IngressRule{
			{Host: "b.test", Path: "/", PortName: "http", Port: 8080, Since: since, Backends: []api.IngressBackend{be}},
			{Host: "a.test", Path: "/api", Port: 9090, Since: since},
		}},
		{Namespace: "d", Workload: "shop", Conflicts: []api.IngressConflict{{Host: "b.test", Path: "/", HeldBy: "d/web", Since: since}}},
	}
	var got []string
	for _, v := range IngressViews(routes, map[string]int{"d/web": 2, "d/shop": 1}) {
		got = append(got, fmt.Sprintf("%s%s %s %d/%d %s", v.Host, v.Path, v.Workload, v.Ready, v.Assigned, v.Status))
	}
	want := "a.test/api d/web 0/2 NoBackends\nb.test/ d/shop 0/1 Conflict: d/web\nb.test/ d/web 1/2 Routed"
	if strings.Join(got, "\n") != want {
		t.Errorf("views:\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}

// TestCertificatePendingUntilTheLeaderLooks: a rule naming a certificate
// pair of which no record exists yet (the leader has not read the
// directory since) is pending, with no error; once the leader recorded the
// pair missing, it is CertificateMissing with the leader's reason; an
// imported pair gives its expiry.
func TestCertificatePendingUntilTheLeaderLooks(t *testing.T) {
	notAfter := time.Unix(5000, 0).UTC()
	view := func(certs ...api.IngressCertificate) api.IngressRouteView {
		routes := []api.IngressRoutes{{Namespace: "d", Workload: "shop", Rules: []api.IngressRule{
			{Host: "shop.test", Path: "/", Port: 80, TLS: true, TLSCertificate: "shop"},
		}}}
		return WithCertificates(IngressViews(routes, nil), certs)[0]
	}
	if v := view(); v.Status != api.IngressCertificatePending || v.CertificateError != "" {
		t.Errorf("before the leader looked: status %s, error %q; want %s and no error", v.Status, v.CertificateError, api.IngressCertificatePending)
	}
	missing := api.IngressCertificate{Kind: api.CertificateFile, Name: "shop", LastError: "no certificate pair shop.crt and shop.key in the ingress certificate directory /d of the leader"}
	if v := view(missing); v.Status != api.IngressCertificateMissing || v.CertificateError != missing.LastError {
		t.Errorf("after the leader looked: status %s, error %q; want %s, %q", v.Status, v.CertificateError, api.IngressCertificateMissing, missing.LastError)
	}
	good := api.IngressCertificate{Kind: api.CertificateFile, Name: "shop", Hosts: []string{"shop.test"}, Fingerprint: "fp", NotAfter: notAfter}
	if v := view(good); v.Status != api.IngressNoBackends || !v.CertificateNotAfter.Equal(notAfter) || v.CertificateError != "" {
		t.Errorf("imported: status %s, expires %s, error %q; want NoBackends, %s", v.Status, v.CertificateNotAfter, v.CertificateError, notAfter)
	}
}
