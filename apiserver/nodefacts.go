package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// Facts a node reports: a worker has no right to write etcd itself
// (resources.WorkerGrants), so its status, build records and events come
// here, behind authenticateNode: a node's certificate writes only under its
// own name. The handlers check the request and record each fact with
// resources.NodeFacts, as a member records its own.

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

// postNodeStatus stores a node's heartbeat. The caller is the node itself
// (its client certificate names it) or holds the admin token.
func (s *Server) postNodeStatus(w http.ResponseWriter, r *http.Request) {
	var st api.NodeStatus
	node, ok := s.readNodeReport(w, r, "node status", 1<<20, &st)
	if !ok {
		return
	}
	if st.NodeName != node {
		writeError(w, badRequest("node status: nodeName %q does not match the URL's node %q", st.NodeName, node))
		return
	}
	if st.Overlay != nil {
		if problems := overlayProblems(st.Overlay.PublicKey, st.Overlay.Port); len(problems) > 0 {
			for i := range problems {
				problems[i].Field = "overlay." + strings.ToLower(problems[i].Field[:1]) + problems[i].Field[1:]
			}
			writeError(w, &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeInvalid,
				Message: "node status: invalid overlay", Details: problems})
			return
		}
	}
	if msg := usageProblem(st.Usage); msg != "" {
		writeError(w, badRequest("node status: usage.%s", msg))
		return
	}
	if err := s.facts.RecordStatus(r.Context(), st); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// authenticateNode lets a request through with the admin token or with a
// client certificate of the cluster CA whose common name is the {node} of
// the URL.
func (s *Server) authenticateNode(next http.Handler) http.Handler {
	token := s.authenticate(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cn, ok := peerCN(r); ok && !isMetricsCert(r) && cn == chi.URLParam(r, "node") {
			noteActor(r, "node:"+chi.URLParam(r, "node"))
			next.ServeHTTP(w, r)
			return
		}
		token.ServeHTTP(w, r)
	})
}

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
	if err := s.facts.PutBuildRecordJSON(r.Context(), ref, raw); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// postNodeEvent records an event a node reports; the time is the
// leader's (resources.NodeFacts.AppendEvent).
func (s *Server) postNodeEvent(w http.ResponseWriter, r *http.Request) {
	var ev api.Event
	if _, ok := s.readNodeReport(w, r, "event", 64<<10, &ev); !ok {
		return
	}
	ev.Normalize()
	switch {
	case ev.Kind != "" && !slices.Contains(api.EventKinds, ev.Kind):
		writeError(w, badRequest("event: kind %q is not one of %s", ev.Kind, strings.Join(api.EventKinds, ", ")))
		return
	case ev.Kind != "" && ev.Object != ev.Path():
		writeError(w, badRequest("event: object %q does not match kind, namespace and name (%s)", ev.Object, ev.Path()))
		return
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
	if err := s.facts.AppendEvent(r.Context(), ev); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// postNodeDeparture records that the node's agent leaves for good
// (NodeFacts.RecordDeparture): its Service instances move at once.
func (s *Server) postNodeDeparture(w http.ResponseWriter, r *http.Request) {
	var d api.NodeDeparture
	node, ok := s.readNodeReport(w, r, "departure", 4<<10, &d)
	if !ok {
		return
	}
	if err := s.facts.RecordDeparture(r.Context(), node, d); err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.cfg.Logger.Info().Str("node", node).Msg("node departed")
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

// usageProblem says what is wrong with a reported usage sample ("" when
// nothing is): counters are never negative, and each container names its
// instance.
func usageProblem(u *api.NodeUsage) string {
	if u == nil {
		return ""
	}
	negative := func(field string, r api.ResourceUsage) string {
		for _, f := range []struct {
			name string
			v    int64
		}{{"cpuMillis", r.CPUMillis}, {"memoryBytes", r.MemoryBytes}, {"diskReadBytes", r.DiskReadBytes},
			{"diskWriteBytes", r.DiskWriteBytes}, {"networkRxBytes", r.NetworkRxBytes}, {"networkTxBytes", r.NetworkTxBytes}} {
			if f.v < 0 {
				return fmt.Sprintf("%s%s: %d is negative", field, f.name, f.v)
			}
		}
		return ""
	}
	if msg := negative("", u.ResourceUsage); msg != "" {
		return msg
	}
	for i, c := range u.Containers {
		field := fmt.Sprintf("containers[%d].", i)
		if c.InstanceID == "" || len(c.InstanceID) > maxEventObject {
			return field + fmt.Sprintf("instanceID: must be 1 to %d bytes", maxEventObject)
		}
		if msg := negative(field, c.ResourceUsage); msg != "" {
			return msg
		}
	}
	return ""
}
