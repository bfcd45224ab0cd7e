package apiserver

import (
	"encoding/pem"
	"net/http"
	"slices"

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
