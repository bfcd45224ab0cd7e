package apiserver

import (
	"encoding/json"
	"net/http"
	"regexp"
	"time"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// Facts a node reports besides its status: a worker has no right to write
// etcd itself (resources.WorkerGrants), so its build records and events
// come here, behind authenticateNode: a node's certificate writes only
// under its own name.

// Limits of a reported event.
const (
	maxEventObject  = 253
	maxEventReason  = 64
	maxEventMessage = 4 << 10
)

var (
	fullCommitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
	reasonRE     = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

// putNodeBuildRecord stores a node's record of a build, as the node sent
// it, once its names match the URL's.
func (s *Server) putNodeBuildRecord(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	node, ok := s.readNodeReport(w, r, "build record", 64<<10, &raw)
	if !ok {
		return
	}
	ns, name, commit := chi.URLParam(r, "ns"), chi.URLParam(r, "name"), chi.URLParam(r, "commit")
	switch {
	case !quadlet.IsDNSLabel(ns):
		writeError(w, badRequest("invalid namespace %q in the URL: must be a DNS label", ns))
		return
	case !quadlet.IsDNSLabel(name):
		writeError(w, badRequest("invalid workload name %q in the URL: must be a DNS label", name))
		return
	case !fullCommitRE.MatchString(commit):
		writeError(w, badRequest("invalid commit %q in the URL: must be 40 (or 64) lowercase hex digits", commit))
		return
	}
	var ref api.Build
	if err := json.Unmarshal(raw, &ref); err != nil {
		writeError(w, badRequest("build record: must be a JSON object: %v", err))
		return
	}
	for _, f := range []struct{ field, got, want string }{
		{"node", ref.Node, node}, {"namespace", ref.Namespace, ns}, {"workload", ref.Workload, name}, {"commit", ref.Commit, commit},
	} {
		if f.got != f.want {
			writeError(w, badRequest("build record: %s %q does not match the URL's %q", f.field, f.got, f.want))
			return
		}
	}
	if err := s.cfg.Repo.PutBuildRecordJSON(r.Context(), ns, name, commit, node, raw); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// postNodeEvent records an event a node reports; the time is the
// leader's.
func (s *Server) postNodeEvent(w http.ResponseWriter, r *http.Request) {
	var ev api.Event
	if _, ok := s.readNodeReport(w, r, "event", 64<<10, &ev); !ok {
		return
	}
	switch {
	case ev.Type != api.EventNormal && ev.Type != api.EventWarning:
		writeError(w, badRequest("event: type %q must be %s or %s", ev.Type, api.EventNormal, api.EventWarning))
		return
	case ev.Object == "" || len(ev.Object) > maxEventObject:
		writeError(w, badRequest("event: object must be 1 to %d bytes", maxEventObject))
		return
	case len(ev.Reason) > maxEventReason || !reasonRE.MatchString(ev.Reason):
		writeError(w, badRequest("event: reason %q must be a CamelCase word of at most %d characters", ev.Reason, maxEventReason))
		return
	case len(ev.Message) > maxEventMessage:
		writeError(w, badRequest("event: message is longer than %d bytes", maxEventMessage))
		return
	}
	ev.Time = time.Now().UTC()
	if err := s.cfg.Repo.AppendEvent(r.Context(), ev); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readNodeReport checks the URL's {node} and reads the JSON body of what a
// node reports into v (at most limit bytes, or the server's MaxJSONBytes
// when larger); it answers the request and returns false when either is
// wrong.
func (s *Server) readNodeReport(w http.ResponseWriter, r *http.Request, what string, limit int64, v any) (string, bool) {
	node := chi.URLParam(r, "node")
	if !quadlet.IsDNSLabel(node) {
		writeError(w, badRequest("invalid node name %q in the URL: must be a DNS label", node))
		return "", false
	}
	if apiErr := readJSON(w, r, max(s.cfg.MaxJSONBytes, limit), what, v); apiErr != nil {
		writeError(w, apiErr)
		return "", false
	}
	return node, true
}
