package apiserver

import (
	"net/http"

	"kat.dws.rip/kat/api"
)

// postBackup takes an etcd snapshot now (katcall backup).
func (s *Server) postBackup(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Backup == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal,
			Message: "this server takes no etcd snapshots: ask the leader's API (with an external etcd, back it up with etcd's own tools)"})
		return
	}
	b, err := s.cfg.Backup(r.Context())
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: "backup failed: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, b)
}
