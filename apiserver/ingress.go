package apiserver

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
)

// listIngress serves GET /v1alpha1/ingress: every host and path some
// workload's spec.ingress asks for, who serves it (or who holds it, for a
// rule in conflict), its ready backends out of the workload's instances,
// sorted by host, path and workload.
func (s *Server) listIngress(w http.ResponseWriter, r *http.Request) {
	routes, err := s.cfg.Repo.ListIngressRoutes(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	as, err := s.cfg.Repo.ListAssignmentsWithoutFiles(r.Context(), "")
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	assigned := map[string]int{}
	for _, a := range as {
		if a.LeavingAt.IsZero() {
			assigned[a.Namespace+"/"+a.Workload]++
		}
	}
	certs, err := s.cfg.Repo.ListIngressCertificates(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, WithCertificates(IngressViews(routes, assigned), certs))
}

// WithCertificates adds to the views of rules with TLS the expiry of the
// certificate their host is served with, or why there is none: the status
// CertificatePending while the leader has not yet read the rule's
// certificate pair (no record of it), else the last import or ACME error
// and the status CertificateMissing (the host is then served over plain
// HTTP).
func WithCertificates(views []api.IngressRouteView, certs []api.IngressCertificate) []api.IngressRouteView {
	byKey := map[string]api.IngressCertificate{}
	for _, c := range certs {
		byKey[c.Kind+"/"+c.Name] = c
	}
	for i := range views {
		v := &views[i]
		if !v.TLS {
			continue
		}
		kind, name := api.IngressRule{Host: v.Host, TLSCertificate: v.TLSCertificate}.TLSSource()
		c, stored := byKey[kind+"/"+name]
		v.CertificateError = c.LastError
		status := api.IngressCertificateMissing
		switch {
		case c.Fingerprint != "" && !c.Covers(v.Host):
			v.CertificateError = fmt.Sprintf("certificate %s/%s does not name %s (it names %s)", kind, name, v.Host, strings.Join(c.Hosts, ", "))
		case c.Fingerprint != "":
			v.CertificateNotAfter = c.NotAfter
			continue
		case !stored && kind == api.CertificateFile:
			status = api.IngressCertificatePending // the leader has not looked for the pair yet
		case c.LastError == "" && kind == api.CertificateFile:
			v.CertificateError = "no certificate pair " + name + ".crt and " + name + ".key imported from the ingress certificate directory"
		case c.LastError == "":
			v.CertificateError = "not issued yet (is kat-agent --acme-directory set?)"
		}
		if v.Status == api.IngressRouted || v.Status == api.IngressNoBackends {
			v.Status = status
		}
	}
	return views
}

// IngressViews are the rows of GET /v1alpha1/ingress for the records
// routes, with assigned the number of instances of each workload ("ns/name")
// that are not leaving.
func IngressViews(routes []api.IngressRoutes, assigned map[string]int) []api.IngressRouteView {
	out := []api.IngressRouteView{}
	for _, r := range routes {
		key := r.Namespace + "/" + r.Workload
		for _, rule := range r.Rules {
			v := api.IngressRouteView{
				Host: rule.Host, Path: rule.Path, Workload: key, Field: rule.Field, Port: rule.Port, PortName: rule.PortName,
				TLS: rule.TLS, TLSCertificate: rule.TLSCertificate, Ready: len(rule.Backends), Assigned: assigned[key], Backends: rule.Backends, Since: rule.Since,
				Status: api.IngressRouted,
			}
			if len(rule.Backends) == 0 {
				v.Status = api.IngressNoBackends
			}
			out = append(out, v)
		}
		for _, c := range r.Conflicts {
			out = append(out, api.IngressRouteView{
				Host: c.Host, Path: c.Path, Workload: key, Field: c.Field, Assigned: assigned[key],
				Status: "Conflict: " + c.HeldBy, Since: c.Since,
			})
		}
	}
	slices.SortFunc(out, func(a, b api.IngressRouteView) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Path, b.Path), strings.Compare(a.Workload, b.Workload))
	})
	return out
}
