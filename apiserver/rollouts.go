package apiserver

import (
	"net/http"
	"strconv"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// getWorkloadHistory lists a workload's archived generations with their
// outcomes.
func (s *Server) getWorkloadHistory(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	h, err := s.cfg.Repo.WorkloadHistory(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// generationQuery reads a generation from the query parameter key: 0 when
// absent.
func generationQuery(r *http.Request, key string) (int64, *api.Error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return 0, nil
	}
	g, err := strconv.ParseInt(v, 10, 64)
	if err != nil || g < 1 {
		return 0, badRequest("query parameter %q: %q is not a generation (a number from 1)", key, v)
	}
	return g, nil
}

// getWorkloadRollout answers the rollout of a workload's current generation
// and the outcome of the generation asked about (?generation=, default the
// current one).
func (s *Server) getWorkloadRollout(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	asked, apiErr := generationQuery(r, "generation")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	h, err := s.cfg.Repo.WorkloadHistory(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	ro, _, err := s.cfg.Repo.GetRollout(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if asked == 0 {
		asked = wl.Generation
	}
	out := api.RolloutStatus{WorkloadMeta: wl.WorkloadMeta, Asked: asked,
		Outcome: api.OutcomeInProgress, Rollout: ro}
	for _, e := range h {
		if e.Generation == asked {
			out.Outcome = e.Outcome
		}
	}
	dr, err := s.cfg.Repo.GetDaemonRollout(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if dr != nil {
		out.Daemon = &dr.DaemonRollout
	}
	writeJSON(w, http.StatusOK, out)
}

// rollbackWorkload applies an earlier generation's files again
// (?toGeneration=, default the previous one that rolled out successfully).
func (s *Server) rollbackWorkload(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	to, apiErr := generationQuery(r, "toGeneration")
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	res, applied, err := s.cfg.Repo.RollbackWorkload(r.Context(), resources.RollbackRequest{Namespace: ns, Name: name, ToGeneration: to})
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, api.RollbackResult{Workload: workloadView(*wl), From: res.Meta.Rollback.From, To: applied,
		GitSuspended: res.Meta.Owner.Kind == api.OwnerGit && res.Meta.Suspended})
}
