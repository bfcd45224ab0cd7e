package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

func (s *Server) namespaceViews(ctx context.Context) ([]api.NamespaceView, error) {
	nss, err := s.cfg.Repo.ListNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := s.cfg.Repo.ListWorkloads(ctx, "")
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, w := range ws {
		count[w.Namespace]++
	}
	out := make([]api.NamespaceView, 0, len(nss))
	for _, ns := range nss {
		out = append(out, namespaceView(ns, count[ns.Name]))
	}
	return out, nil
}

func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request) {
	out, err := s.namespaceViews(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getNamespace(w http.ResponseWriter, r *http.Request) {
	name, ok := s.namespaceParam(w, r)
	if !ok {
		return
	}
	ns, err := s.cfg.Repo.GetNamespace(r.Context(), name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	ws, err := s.cfg.Repo.ListWorkloads(r.Context(), name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, namespaceView(*ns, len(ws)))
}

// parseNamespaceBody reads a namespace.kat document from the request body.
func (s *Server) parseNamespaceBody(w http.ResponseWriter, r *http.Request) (*quadlet.Namespace, bool) {
	body, apiErr := readBody(w, r, s.cfg.MaxJSONBytes, yamlBody)
	if apiErr != nil {
		writeError(w, apiErr)
		return nil, false
	}
	ns, err := quadlet.ParseNamespace(quadlet.NamespaceFile, body)
	if err != nil {
		writeError(w, errorFor(err))
		return nil, false
	}
	return ns, true
}

func (s *Server) createNamespace(w http.ResponseWriter, r *http.Request) {
	doc, ok := s.parseNamespaceBody(w, r)
	if !ok {
		return
	}
	noteName(r, doc.Metadata.Name)
	ns, err := s.cfg.Repo.CreateNamespace(r.Context(), doc.Metadata.Name, doc.Metadata.Labels)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.recordEvent(r.Context(), namespaceRef(*ns), api.EventNormal, "Created", "created through the API")
	writeJSON(w, http.StatusCreated, namespaceView(*ns, 0))
}

func (s *Server) putNamespace(w http.ResponseWriter, r *http.Request) {
	name, ok := s.namespaceParam(w, r)
	if !ok {
		return
	}
	doc, ok := s.parseNamespaceBody(w, r)
	if !ok {
		return
	}
	if doc.Metadata.Name != name {
		writeError(w, invalidQuadlet(quadlet.ErrorList{{File: quadlet.NamespaceFile, Field: "metadata.name",
			Message: fmt.Sprintf("names namespace %q but the request is for %q", doc.Metadata.Name, name)}}))
		return
	}
	ns, created, err := s.cfg.Repo.PutNamespace(r.Context(), name, doc.Metadata.Labels)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	status, reason := http.StatusOK, "Updated"
	if created {
		status, reason = http.StatusCreated, "Created"
	}
	s.recordEvent(r.Context(), namespaceRef(*ns), api.EventNormal, reason, strings.ToLower(reason)+" through the API")
	writeJSON(w, status, namespaceView(*ns, 0))
}

func (s *Server) deleteNamespace(w http.ResponseWriter, r *http.Request) {
	name, ok := s.namespaceParam(w, r)
	if !ok {
		return
	}
	if err := s.cfg.Repo.DeleteNamespace(r.Context(), name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.recordEvent(r.Context(), api.ObjectRef{Kind: api.KindNamespace, Name: name}, api.EventNormal, "Deleted", "deleted through the API")
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

func namespaceView(ns api.Namespace, workloads int) api.NamespaceView {
	return api.NamespaceView{Namespace: ns, Workloads: workloads}
}

func namespaceRef(ns api.Namespace) api.ObjectRef {
	return api.ObjectRef{Kind: api.KindNamespace, Name: ns.Name, UID: ns.UID}
}
