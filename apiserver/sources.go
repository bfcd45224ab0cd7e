package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitsync"
	"kat.dws.rip/kat/gitx"
)

// GitOps is what the API needs of the leader's gitsync.Manager.
type GitOps interface {
	// Trigger asks a source (every source for "") to poll now and returns
	// how many were triggered.
	Trigger(name string) (int, error)
	// Suspend and Resume pause and hand back Git management of a workload.
	Suspend(ctx context.Context, ns, name string) (*api.WorkloadMeta, error)
	Resume(ctx context.Context, ns, name string) (*api.WorkloadMeta, error)
}

var _ GitOps = (*gitsync.Manager)(nil)

func (s *Server) listSources(w http.ResponseWriter, r *http.Request) {
	srcs, err := s.cfg.Repo.ListSources(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if srcs == nil {
		srcs = []api.Source{}
	}
	writeJSON(w, http.StatusOK, srcs)
}

func (s *Server) getSource(w http.ResponseWriter, r *http.Request) {
	src, err := s.cfg.Repo.GetSource(r.Context(), chi.URLParam(r, "source"))
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, src)
}

func (s *Server) putSource(w http.ResponseWriter, r *http.Request) {
	body, apiErr := readBody(w, r, s.cfg.MaxJSONBytes, jsonBody)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	var spec api.SourceSpec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		writeError(w, badRequest("source spec: %v", err))
		return
	}
	name := chi.URLParam(r, "source")
	if spec.Name != "" && spec.Name != name {
		writeError(w, badRequest("source spec: name %q does not match the URL's %q", spec.Name, name))
		return
	}
	spec.Name = name
	spec = gitsync.Defaulted(spec)
	if err := gitsync.ValidateSpec(spec); err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	created, err := s.cfg.Repo.PutSourceSpec(r.Context(), spec)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	src, err := s.cfg.Repo.GetSource(r.Context(), name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	code, reason := http.StatusOK, "Updated"
	if created {
		code, reason = http.StatusCreated, "Created"
	}
	s.recordEvent(r.Context(), api.SourceRef(name), api.EventNormal, reason,
		fmt.Sprintf("%s through the API: %s branch %s", strings.ToLower(reason), gitx.RedactURL(spec.URL), spec.Branch))
	writeJSON(w, code, src)
}

func (s *Server) deleteSource(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "source")
	if err := s.cfg.Repo.DeleteSource(r.Context(), name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.recordEvent(r.Context(), api.SourceRef(name), api.EventNormal, "Deleted", "deleted through the API")
	w.WriteHeader(http.StatusNoContent)
}

// syncSources triggers one source ({source}) or all: the same path a webhook
// takes.
func (s *Server) syncSources(w http.ResponseWriter, r *http.Request) {
	if s.cfg.GitOps == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal, Message: "Git sync is not running on this node"})
		return
	}
	name := chi.URLParam(r, "source")
	if name != "" {
		if _, err := s.cfg.Repo.GetSource(r.Context(), name); err != nil {
			writeError(w, errorFor(err))
			return
		}
	}
	n, err := s.cfg.GitOps.Trigger(name)
	if errors.Is(err, gitsync.ErrUnknownSource) {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: "source " + name + " exists but is not running: check its spec (katcall get sources)"})
		return
	}
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusAccepted, api.SyncResult{Triggered: n})
}

func (s *Server) suspendWorkload(w http.ResponseWriter, r *http.Request) { s.setSuspended(w, r, true) }
func (s *Server) resumeWorkload(w http.ResponseWriter, r *http.Request)  { s.setSuspended(w, r, false) }

func (s *Server) setSuspended(w http.ResponseWriter, r *http.Request, suspend bool) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	var meta *api.WorkloadMeta
	var err error
	switch {
	case s.cfg.GitOps == nil:
		meta, err = s.cfg.Repo.SetSuspended(r.Context(), ns, name, suspend)
	case suspend:
		meta, err = s.cfg.GitOps.Suspend(r.Context(), ns, name)
	default:
		meta, err = s.cfg.GitOps.Resume(r.Context(), ns, name)
	}
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, name)
	if err != nil {
		wl = &api.Workload{WorkloadMeta: *meta}
	}
	writeJSON(w, http.StatusOK, workloadView(*wl))
}
