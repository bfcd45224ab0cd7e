package apiserver

import (
	"net/http"
	"strconv"
	"strings"
	"unicode"

	"kat.dws.rip/kat/api"
)

// listAudit serves GET /v1alpha1/audit: the newest entries matching the
// filters ?actor= and ?resource=, at most ?limit= (default 100), oldest
// first.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q, apiErr := s.auditQuery(r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	all, err := s.cfg.Repo.ListAudit(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	out := make([]api.AuditEntry, 0, min(len(all), q.Limit))
	for i := len(all) - 1; i >= 0 && len(out) < q.Limit; i-- {
		if auditMatches(all[i], q) {
			out = append(out, all[i])
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	writeJSON(w, http.StatusOK, out)
}

// auditQuery reads and checks the query of GET /v1alpha1/audit.
func (s *Server) auditQuery(r *http.Request) (api.AuditQuery, *api.Error) {
	q := api.AuditQuery{Limit: defaultAuditLimit}
	keep := s.cfg.AuditKeep
	for k, vs := range r.URL.Query() {
		if len(vs) != 1 {
			return q, badRequest("query parameter %q: give it once", k)
		}
		v := vs[0]
		switch k {
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > keep {
				return q, badRequest("query parameter \"limit\": %q is not a number from 1 to %d", clip(v, 32), keep)
			}
			q.Limit = n
		case "actor", "resource":
			if v == "" || len(v) > 2*maxAuditField || strings.ContainsFunc(v, unicode.IsControl) {
				return q, badRequest("query parameter %q: must be 1 to %d printable characters", k, 2*maxAuditField)
			}
			if k == "actor" {
				q.Actor = v
			} else {
				q.Resource = strings.TrimSuffix(v, "/")
			}
		default:
			return q, badRequest("unknown query parameter %q: want limit, actor or resource", clip(k, 32))
		}
	}
	return q, nil
}

// auditMatches reports whether e passes q's filters.
func auditMatches(e api.AuditEntry, q api.AuditQuery) bool {
	if q.Actor != "" {
		if prefix, ok := strings.CutSuffix(q.Actor, ":"); ok {
			if !strings.HasPrefix(e.Actor, prefix+":") {
				return false
			}
		} else if e.Actor != q.Actor {
			return false
		}
	}
	if q.Resource != "" {
		obj := e.Object()
		if obj != q.Resource && !strings.HasPrefix(obj, q.Resource+"/") {
			return false
		}
	}
	return true
}
