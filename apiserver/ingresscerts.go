package apiserver

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// deliverIngressCertificate answers a node that runs an ingress proxy
// instance the certificate of kind and name with its key opened (GET
// /v1alpha1/nodes/{node}/ingress/certificates/{kind}/{name}, the node's
// own certificate only). Whether the node runs a proxy is checked before
// whether the certificate exists. The body is neither logged nor audited.
func (s *Server) deliverIngressCertificate(w http.ResponseWriter, r *http.Request) {
	if s.secretsUnavailable(w) {
		return
	}
	node, kind, name := chi.URLParam(r, "node"), chi.URLParam(r, "kind"), chi.URLParam(r, "name")
	as, err := s.cfg.Repo.ListAssignments(r.Context(), node)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if !slices.ContainsFunc(as, isIngressProxy) {
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "node " + node + " runs no ingress proxy instance: ingress certificates are delivered to ingress proxies only"})
		return
	}
	c, err := s.cfg.Repo.GetIngressCertificate(r.Context(), kind, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if c.Fingerprint == "" {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: "ingress certificate " + kind + "/" + name + " holds no certificate yet"})
		return
	}
	der, err := s.cfg.Secrets.Sealer.Open(api.IngressCertificateSealPurpose(kind, name), c.SealedKey)
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal,
			Message: "the key of ingress certificate " + kind + "/" + name + " does not open with this cluster's CA"})
		return
	}
	out := api.IngressCertificateBundle{Kind: kind, Name: name, Fingerprint: c.Fingerprint, ChainPEM: c.ChainPEM,
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})}
	clear(der)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// isIngressProxy reports whether a is an instance of the ingress proxy
// (quadlet.LabelIngressProxy).
func isIngressProxy(a api.Assignment) bool {
	q, err := quadlet.ParseWorkload(a.Files, quadlet.ParseOptions{DefaultNamespace: a.Namespace})
	return err == nil && q.Workload.Metadata.Labels[quadlet.LabelIngressProxy] != ""
}

// listIngressCertificates serves GET /v1alpha1/ingress/certificates: every
// certificate record, without its chain or key, with the rules that use it.
func (s *Server) listIngressCertificates(w http.ResponseWriter, r *http.Request) {
	certs, err := s.cfg.Repo.ListIngressCertificates(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	views, err := s.certificateViews(r, certs)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, views)
}

// certificateViews are CertificateViews of certs with the stored routes.
func (s *Server) certificateViews(r *http.Request, certs []api.IngressCertificate) ([]api.IngressCertificateView, error) {
	routes, err := s.cfg.Repo.ListIngressRoutes(r.Context())
	if err != nil {
		return nil, err
	}
	return CertificateViews(certs, routes), nil
}

// CertificateViews are the rows of GET /v1alpha1/ingress/certificates:
// each record without its chain or key, and the held rules
// ("host/path ns/name") that name it (a file pair by tlsCertificate, an
// ACME certificate by host).
func CertificateViews(certs []api.IngressCertificate, routes []api.IngressRoutes) []api.IngressCertificateView {
	users := map[string][]string{}
	for _, r := range routes {
		for _, rule := range r.Rules {
			if !rule.TLS {
				continue
			}
			kind, name := rule.TLSSource()
			users[kind+"/"+name] = append(users[kind+"/"+name], rule.Host+rule.Path+" "+r.Namespace+"/"+r.Workload)
		}
	}
	out := make([]api.IngressCertificateView, 0, len(certs))
	for _, c := range certs {
		used := users[c.Kind+"/"+c.Name]
		slices.Sort(used)
		c.ChainPEM, c.SealedKey = nil, nil
		out = append(out, api.IngressCertificateView{IngressCertificate: c, Routes: used})
	}
	return out
}

// deleteIngressCertificate serves DELETE
// /v1alpha1/ingress/certificates/{kind}/{name}: it deletes a certificate
// record (an ACME certificate and its back-off, or a file pair's import).
// A certificate some rule still uses is refused (409) without
// ?force=true, as its hosts would be served over plain HTTP until the
// leader has one again: at once for a pair still in its directory, after a
// new order for ACME.
func (s *Server) deleteIngressCertificate(w http.ResponseWriter, r *http.Request) {
	kind, name := chi.URLParam(r, "kind"), chi.URLParam(r, "name")
	noteName(r, kind+"/"+name)
	switch kind {
	case api.CertificateFile:
		if !quadlet.IsDNSLabel(name) {
			writeError(w, badRequest("invalid certificate name %q in the URL: a file pair's name is a DNS label", name))
			return
		}
	case api.CertificateACME:
		if !isHostName(name) {
			writeError(w, badRequest("invalid certificate name %q in the URL: an ACME certificate's name is its host, lowercase DNS labels separated by dots", name))
			return
		}
	default:
		writeError(w, badRequest("invalid certificate kind %q in the URL: want %s or %s", kind, api.CertificateFile, api.CertificateACME))
		return
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	c, err := s.cfg.Repo.GetIngressCertificate(r.Context(), kind, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	views, err := s.certificateViews(r, []api.IngressCertificate{*c})
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if used := views[0].Routes; len(used) > 0 && !force {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"certificate %s/%s serves %s: remove its rules first, or delete it anyway with --force (its hosts are served over plain HTTP until the leader has a certificate again)",
			kind, name, strings.Join(used, ", "))})
		return
	}
	if err := s.cfg.Repo.DeleteIngressCertificate(r.Context(), kind, name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.cfg.Logger.Info().Str("certificate", kind+"/"+name).Bool("force", force).Msg("ingress certificate deleted")
	w.WriteHeader(http.StatusNoContent)
}

// isHostName reports whether s is a lowercase DNS name of labels.
func isHostName(s string) bool {
	labels := strings.Split(s, ".")
	return len(s) <= 253 && !slices.ContainsFunc(labels, func(l string) bool { return !quadlet.IsDNSLabel(l) })
}
