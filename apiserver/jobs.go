package apiserver

import (
	"net/http"

	"kat.dws.rip/kat/quadlet"
)

// listJobRuns serves GET /v1alpha1/jobs[?namespace=NS]: every run the leader
// keeps of every Job (the history limits decide how many), sorted by
// namespace, name and start time.
func (s *Server) listJobRuns(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "" && !quadlet.IsDNSLabel(ns) {
		writeError(w, badRequest("namespace: %q must be a DNS label (lowercase letters, digits and '-', at most 63)", ns))
		return
	}
	runs, err := s.cfg.Repo.ListJobRuns(r.Context(), ns)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, runs)
}
