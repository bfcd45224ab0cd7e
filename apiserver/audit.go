package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/webhook"
)

// The audit log records every mutating call (any method but GET, HEAD and
// OPTIONS) and every webhook, after its handler ran: who (the credential
// that authenticated it), what (verb, resource, namespace/name), when, the
// status and a refusal's message. Each entry goes to a capped list in etcd
// (resources.AppendAudit) and to one log line (component=audit). A token,
// a join secret or a request body is never recorded. Left out:
//
//   - the routes in auditExcluded: nodes' machine traffic, every few seconds
//     per node, which would push operators' calls out of the list;
//   - 429 answers, which change nothing: a client over its rate limit
//     would otherwise fill the list;
//   - from etcd only, past Config.AuditUnauthenticatedLimit a minute,
//     calls that showed no valid credential: they are still logged;
//   - requests that match no route, and those the global rate limit
//     refused before routing: they name no resource. The access log has
//     them all.

// DefaultAuditUnauthenticated is Config.AuditUnauthenticatedLimit's
// default.
const DefaultAuditUnauthenticated = 60

// Limits of the audit log.
const (
	// auditWriteTimeout bounds the etcd write of one entry; the answer
	// waits for it, at most this long.
	auditWriteTimeout = 2 * time.Second
	// maxAuditField caps a name, detail or actor taken from a request.
	maxAuditField = 253
	// maxAuditError caps a recorded error message.
	maxAuditError = 256
	// maxErrorCapture is how much of an error answer is read for its
	// message.
	maxErrorCapture = 8 << 10
	// defaultAuditLimit is how many entries GET /v1alpha1/audit returns
	// without ?limit.
	defaultAuditLimit = 100
)

// auditRoute says how a mutating route is recorded.
type auditRoute struct {
	verb, resource string
}

// auditRoutes describes each mutating route by "METHOD pattern", or by
// "* pattern" for a route of every method. A mutating route missing here is
// still recorded, with its method as the verb and its pattern as the
// resource (TestEveryMutatingRouteIsAudited asks for an entry).
var auditRoutes = map[string]auditRoute{
	"* /v1alpha1/webhooks/{provider}":                          {"push", "repo"},
	"POST " + api.JoinPath:                                     {"join", "node"},
	"PUT /v1alpha1/nodes/{node}/builds/{ns}/{name}/{commit}":   {"report", "build"},
	"DELETE /v1alpha1/nodes/{node}":                            {"delete", "node"},
	"POST /v1alpha1/nodes/{node}/cordon":                       {"cordon", "node"},
	"POST /v1alpha1/nodes/{node}/uncordon":                     {"uncordon", "node"},
	"POST /v1alpha1/nodes/{node}/drain":                        {"drain", "node"},
	"POST /v1alpha1/nodes/{node}/depart":                       {"depart", "node"},
	"POST /v1alpha1/nodes/{node}/handback":                     {"hand-back", "node"},
	"PATCH /v1alpha1/nodes/{node}/labels":                      {"label", "node"},
	"PATCH /v1alpha1/nodes/{node}/taints":                      {"taint", "node"},
	"POST /v1alpha1/join-token":                                {"rotate", "join-token"},
	"POST " + api.MetricsCertPath:                              {"issue", "metrics-certificate"},
	"POST /v1alpha1/namespaces":                                {"create", "namespace"},
	"PUT /v1alpha1/namespaces/{ns}":                            {"apply", "namespace"},
	"DELETE /v1alpha1/namespaces/{ns}":                         {"delete", "namespace"},
	"PUT /v1alpha1/n/{ns}/secrets/{name}":                      {"apply", "secret"},
	"DELETE /v1alpha1/n/{ns}/secrets/{name}":                   {"delete", "secret"},
	"POST /v1alpha1/n/{ns}/workloads":                          {"create", "workload"},
	"PUT /v1alpha1/n/{ns}/workloads":                           {"apply", "workload"},
	"PUT /v1alpha1/n/{ns}/workloads/{name}":                    {"apply", "workload"},
	"DELETE /v1alpha1/n/{ns}/workloads/{name}":                 {"delete", "workload"},
	"POST /v1alpha1/n/{ns}/workloads/{name}/suspend":           {"suspend", "workload"},
	"POST /v1alpha1/n/{ns}/workloads/{name}/resume":            {"resume", "workload"},
	"POST /v1alpha1/n/{ns}/workloads/{name}/rollback":          {"rollback", "workload"},
	"POST /v1alpha1/n/{ns}/workloads/{name}/exec":              {"exec", "workload"},
	"PUT /v1alpha1/sources/{source}":                           {"apply", "source"},
	"DELETE /v1alpha1/sources/{source}":                        {"delete", "source"},
	"POST /v1alpha1/sources/{source}/sync":                     {"sync", "source"},
	"POST /v1alpha1/sync":                                      {"sync", "source"},
	"POST " + api.BackupPath:                                   {"backup", "cluster"},
	"DELETE " + api.IngressCertificatesPath + "/{kind}/{name}": {"delete", "certificate"},
}

// auditRouteOf returns the description of a route in auditRoutes. A
// pattern's trailing slash is ignored: chi gives ".../workloads/" or
// ".../workloads" as the request had it.
func auditRouteOf(method, pattern string) (auditRoute, bool) {
	if len(pattern) > 1 {
		pattern = strings.TrimSuffix(pattern, "/")
	}
	if rt, ok := auditRoutes[method+" "+pattern]; ok {
		return rt, true
	}
	rt, ok := auditRoutes["* "+pattern]
	return rt, ok
}

// auditExcluded are the mutating routes the audit log leaves out, and why.
var auditExcluded = map[string]string{
	"POST /v1alpha1/nodes/{node}/status": "a node's heartbeat, every few seconds per node",
	"POST /v1alpha1/nodes/{node}/events": "an event a node reports: it is itself kept, in the events list",
}

// auditNote is what a request's handlers learn about it for its audit
// entry: who authenticated it, and names only its body holds. Handlers run
// on the request's goroutine, so it needs no lock.
type auditNote struct {
	actor  string
	name   string
	detail string
}

type auditNoteKey struct{}

// noteOf returns the audit note of r, or nil when r is not audited.
func noteOf(r *http.Request) *auditNote {
	n, _ := r.Context().Value(auditNoteKey{}).(*auditNote)
	return n
}

// noteActor records who authenticated r.
func noteActor(r *http.Request, actor string) {
	if n := noteOf(r); n != nil {
		n.actor = actor
	}
}

// noteName records the name of the object r acts on, when only its body
// says it.
func noteName(r *http.Request, name string) {
	if n := noteOf(r); n != nil {
		n.name = name
	}
}

// noteDetail records a detail of r for its audit entry (the instance and
// command of an exec).
func noteDetail(r *http.Request, detail string) {
	if n := noteOf(r); n != nil {
		n.detail = detail
	}
}

func mutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// audit returns the middleware that records each mutating request of mux
// once its handler has answered.
func (s *Server) audit(mux *chi.Mux) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !mutating(r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			note := &auditNote{actor: api.ActorAnonymous}
			ctx := context.WithValue(r.Context(), auditNoteKey{}, note)
			ctx = webhook.WithPushObserver(ctx, func(p webhook.Push) {
				if len(p.RepoURLs) > 0 {
					note.name = p.RepoURLs[0]
				}
				note.detail = p.Ref
			})
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			answer := &errorCapture{ww: ww}
			ww.Tee(answer)
			next.ServeHTTP(ww, r.WithContext(ctx))

			status := ww.Status()
			if status == 0 {
				status = http.StatusOK
			}
			pattern, param := routeOf(mux, r)
			e, ok := auditEntryOf(r.Method, pattern, param, note, status, answer.buf)
			if !ok {
				return
			}
			e.Time = s.cfg.Now().UTC()
			e.Remote = middleware.GetClientIP(r.Context())
			store := !unauthenticated(e) || !s.auditUnauthenticated.OnLimit(headerSink{}, r, "unauthenticated")
			s.recordAudit(r.Context(), e, store)
		})
	}
}

// routeOf returns the route pattern of a request mux has served and its
// URL parameters. A request a route group refused before routing it on
// (a missing token answered by the group's middleware) has only the
// group's pattern ("/v1alpha1/*"): it is looked up again in mux.
func routeOf(mux *chi.Mux, r *http.Request) (string, func(string) string) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return "", func(string) string { return "" }
	}
	if pattern := rctx.RoutePattern(); !strings.HasSuffix(pattern, "/*") {
		return pattern, rctx.URLParam
	}
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	found := chi.NewRouteContext()
	return mux.Find(found, r.Method, path), found.URLParam
}

// auditEntryOf describes a request that was answered status: its route
// (method and chi pattern), URL parameters, note, and the start of its
// error answer. It returns false for a request the audit log leaves out.
func auditEntryOf(method, pattern string, param func(string) string, note *auditNote, status int, answer []byte) (api.AuditEntry, bool) {
	if len(pattern) > 1 {
		pattern = strings.TrimSuffix(pattern, "/")
	}
	if pattern == "" || auditExcluded[method+" "+pattern] != "" || status == http.StatusTooManyRequests {
		return api.AuditEntry{}, false
	}
	rt, ok := auditRouteOf(method, pattern)
	if !ok {
		rt = auditRoute{verb: strings.ToLower(method), resource: pattern}
	}
	e := api.AuditEntry{Actor: note.actor, Verb: rt.verb, Resource: rt.resource, Status: status}
	switch rt.resource {
	case "namespace":
		e.Name = param("ns")
	case "repo":
		e.Actor = "webhook:" + clip(param("provider"), 32)
	case "build":
		e.Namespace, e.Name, e.Detail = param("ns"), param("name"), param("commit")
	default:
		e.Namespace = param("ns")
		for _, p := range []string{"name", "node", "source"} {
			if v := param(p); v != "" {
				e.Name = v
				break
			}
		}
	}
	if note.name != "" {
		e.Name = note.name
	}
	if note.detail != "" {
		e.Detail = note.detail
	}
	e.Actor, e.Namespace, e.Name, e.Detail = clip(e.Actor, maxAuditField), clip(e.Namespace, maxAuditField),
		clip(e.Name, maxAuditField), clip(e.Detail, maxAuditField)
	if status >= 400 {
		e.Error = clip(errorMessage(answer, status), maxAuditError)
	}
	return e, true
}

// unauthenticated reports whether e is a call that showed no valid
// credential: its actor is anonymous, or it is a webhook refused before a
// verified push named its repository.
func unauthenticated(e api.AuditEntry) bool {
	return e.Actor == api.ActorAnonymous || (e.Resource == "repo" && e.Status >= 400 && e.Name == "")
}

// recordAudit logs e and, when store is set, appends it to the audit log in
// etcd, waiting at most auditWriteTimeout; a failed write is logged, and the
// answer goes out all the same.
func (s *Server) recordAudit(ctx context.Context, e api.AuditEntry, store bool) {
	ev := s.auditLog.Info()
	if e.Status >= 400 {
		ev = s.auditLog.Warn()
	}
	ev = ev.Str("actor", e.Actor).Str("verb", e.Verb).Str("resource", e.Resource)
	for _, f := range [][2]string{{"namespace", e.Namespace}, {"name", e.Name}, {"detail", e.Detail}, {"error", e.Error}} {
		if f[1] != "" {
			ev = ev.Str(f[0], f[1])
		}
	}
	ev = ev.Int("status", e.Status).Str("remote", e.Remote)
	if !store {
		// Over AuditUnauthenticatedLimit: the line is the only record.
		ev.Bool("stored", false).Msg("audit")
		return
	}
	ev.Msg("audit")
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
	defer cancel()
	if err := s.cfg.Repo.AppendAudit(wctx, e, s.cfg.AuditKeep); err != nil {
		s.auditLog.Error().Err(err).Str("actor", e.Actor).Str("verb", e.Verb).Str("object", e.Object()).
			Msg("audit entry not stored in etcd")
	}
}

// errorCapture keeps the start of an error answer (status 400 and up), to
// record its message; it is a Tee of the response writer.
type errorCapture struct {
	ww  middleware.WrapResponseWriter
	buf []byte
}

func (c *errorCapture) Write(p []byte) (int, error) {
	if c.ww.Status() >= 400 && len(c.buf) < maxErrorCapture {
		c.buf = append(c.buf, p[:min(len(p), maxErrorCapture-len(c.buf))]...)
	}
	return len(p), nil
}

// errorMessage returns the "message" of an API error body (which may be
// cut short after it), or the status text.
func errorMessage(body []byte, status int) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err == nil && t == json.Delim('{') {
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				break
			}
			if k == "message" {
				var msg string
				if dec.Decode(&msg) == nil && msg != "" {
					return oneLineText(msg)
				}
				break
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				break
			}
		}
	}
	return http.StatusText(status)
}

// oneLineText replaces control characters (newlines) with spaces.
func oneLineText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// clip cuts s to at most n bytes, marking the cut with "...".
func clip(s string, n int) string {
	s = oneLineText(s)
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-3], "") + "..."
}
