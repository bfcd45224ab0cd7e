package apiserver

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestEveryMutatingRouteIsAudited walks the router: every route of a
// mutating method is described in auditRoutes or left out, with a reason,
// in auditExcluded, and neither table names a route that does not exist.
func TestEveryMutatingRouteIsAudited(t *testing.T) {
	t.Parallel()
	s, err := New(Config{
		Repo: resources.New(storetest.New(t)), AdminTokenHash: resources.HashToken("t"),
		Webhooks: http.NotFoundHandler(), CACertPEM: []byte("ca"),
		Join: func(context.Context, api.JoinRequest) (*api.JoinResponse, error) { return &api.JoinResponse{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	err = chi.Walk(s.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if mutating(method) {
			routes = append(routes, method+" "+strings.TrimSuffix(route, "/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		method, pattern, _ := strings.Cut(r, " ")
		if _, ok := auditRouteOf(method, pattern); !ok && auditExcluded[r] == "" {
			t.Errorf("route %q is in neither auditRoutes nor auditExcluded: say how the audit log records it", r)
		}
	}
	for _, table := range []map[string]auditRoute{auditRoutes, func() map[string]auditRoute {
		m := map[string]auditRoute{}
		for k := range auditExcluded {
			m[k] = auditRoute{}
		}
		return m
	}()} {
		for k := range table {
			_, pattern, _ := strings.Cut(k, " ")
			if !slices.Contains(routes, k) && !slices.ContainsFunc(routes, func(r string) bool { return strings.HasSuffix(r, " "+pattern) && strings.HasPrefix(k, "* ") }) {
				t.Errorf("audit table names %q, which is no route", k)
			}
		}
	}
}

// TestAuditEntryOf: how a request is described from its route, URL
// parameters, what its handlers noted and its answer; which requests are
// left out.
func TestAuditEntryOf(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 400)
	for _, tc := range []struct {
		name            string
		method, pattern string
		params          map[string]string
		note            auditNote
		status          int
		answer          string
		want            *api.AuditEntry // nil: not recorded
	}{
		{name: "admin token applies a workload", method: "PUT", pattern: "/v1alpha1/n/{ns}/workloads/{name}",
			params: map[string]string{"ns": "default", "name": "web"}, note: auditNote{actor: "admin"}, status: 200,
			want: &api.AuditEntry{Actor: "admin", Verb: "apply", Resource: "workload", Namespace: "default", Name: "web", Status: 200}},
		{name: "name from the body", method: "PUT", pattern: "/v1alpha1/n/{ns}/workloads/",
			params: map[string]string{"ns": "default"}, note: auditNote{actor: "admin", name: "web"}, status: 201,
			want: &api.AuditEntry{Actor: "admin", Verb: "apply", Resource: "workload", Namespace: "default", Name: "web", Status: 201}},
		{name: "refused apply keeps the message", method: "PUT", pattern: "/v1alpha1/n/{ns}/workloads/",
			params: map[string]string{"ns": "default"}, note: auditNote{actor: "admin"}, status: 422,
			answer: `{"error": "invalid", "message": "workload.kat: spec.replicas: must be\nat least 0", "details": [{"message": "cut sho`,
			want: &api.AuditEntry{Actor: "admin", Verb: "apply", Resource: "workload", Namespace: "default", Status: 422,
				Error: "workload.kat: spec.replicas: must be at least 0"}},
		{name: "no token", method: "DELETE", pattern: "/v1alpha1/nodes/{node}",
			params: map[string]string{"node": "n2"}, note: auditNote{actor: "anonymous"}, status: 401,
			answer: `{"error": "unauthorized", "message": "missing bearer token"}`,
			want:   &api.AuditEntry{Actor: "anonymous", Verb: "delete", Resource: "node", Name: "n2", Status: 401, Error: "missing bearer token"}},
		{name: "error answer that is not JSON", method: "POST", pattern: "/v1alpha1/nodes/{node}/cordon",
			params: map[string]string{"node": "n2"}, note: auditNote{actor: "admin"}, status: 500, answer: "boom",
			want: &api.AuditEntry{Actor: "admin", Verb: "cordon", Resource: "node", Name: "n2", Status: 500, Error: "Internal Server Error"}},
		{name: "node certificate reports a build", method: "PUT", pattern: "/v1alpha1/nodes/{node}/builds/{ns}/{name}/{commit}",
			params: map[string]string{"node": "n1", "ns": "apps", "name": "api", "commit": "abc"}, note: auditNote{actor: "node:n1"}, status: 204,
			want: &api.AuditEntry{Actor: "node:n1", Verb: "report", Resource: "build", Namespace: "apps", Name: "api", Detail: "abc", Status: 204}},
		{name: "webhook names its repository", method: "POST", pattern: "/v1alpha1/webhooks/{provider}",
			params: map[string]string{"provider": "github"}, note: auditNote{actor: "anonymous", name: "https://git.example/a/b.git", detail: "refs/heads/main"}, status: 202,
			want: &api.AuditEntry{Actor: "webhook:github", Verb: "push", Resource: "repo", Name: "https://git.example/a/b.git", Detail: "refs/heads/main", Status: 202}},
		{name: "webhook of another method", method: "PUT", pattern: "/v1alpha1/webhooks/{provider}",
			params: map[string]string{"provider": "gitea"}, note: auditNote{actor: "anonymous"}, status: 405,
			answer: `{"error": "method_not_allowed", "message": "method PUT not allowed: webhooks are POST"}`,
			want:   &api.AuditEntry{Actor: "webhook:gitea", Verb: "push", Resource: "repo", Status: 405, Error: "method PUT not allowed: webhooks are POST"}},
		{name: "namespace is the name", method: "DELETE", pattern: "/v1alpha1/namespaces/{ns}",
			params: map[string]string{"ns": "team"}, note: auditNote{actor: "admin"}, status: 200,
			want: &api.AuditEntry{Actor: "admin", Verb: "delete", Resource: "namespace", Name: "team", Status: 200}},
		{name: "join", method: "POST", pattern: api.JoinPath, note: auditNote{actor: "join-token", name: "n3"}, status: 200,
			want: &api.AuditEntry{Actor: "join-token", Verb: "join", Resource: "node", Name: "n3", Status: 200}},
		{name: "sync of every source", method: "POST", pattern: "/v1alpha1/sync", note: auditNote{actor: "admin"}, status: 200,
			want: &api.AuditEntry{Actor: "admin", Verb: "sync", Resource: "source", Status: 200}},
		{name: "route not in the table", method: "POST", pattern: "/v1alpha1/backups/{name}",
			params: map[string]string{"name": "b1"}, note: auditNote{actor: "admin"}, status: 200,
			want: &api.AuditEntry{Actor: "admin", Verb: "post", Resource: "/v1alpha1/backups/{name}", Name: "b1", Status: 200}},
		{name: "long names are cut", method: "DELETE", pattern: "/v1alpha1/sources/{source}",
			params: map[string]string{"source": long}, note: auditNote{actor: "admin"}, status: 404,
			answer: `{"error": "not_found", "message": "` + long + `"}`,
			want: &api.AuditEntry{Actor: "admin", Verb: "delete", Resource: "source", Name: long[:250] + "...", Status: 404,
				Error: long[:253] + "..."}},
		{name: "heartbeat is left out", method: "POST", pattern: "/v1alpha1/nodes/{node}/status",
			params: map[string]string{"node": "n1"}, note: auditNote{actor: "node:n1"}, status: 204},
		{name: "node event is left out", method: "POST", pattern: "/v1alpha1/nodes/{node}/events",
			params: map[string]string{"node": "n1"}, note: auditNote{actor: "node:n1"}, status: 204},
		{name: "rate limited is left out", method: "PUT", pattern: "/v1alpha1/n/{ns}/workloads/",
			params: map[string]string{"ns": "default"}, note: auditNote{actor: "anonymous"}, status: 429},
		{name: "no route is left out", method: "POST", pattern: "", note: auditNote{actor: "anonymous"}, status: 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			note := tc.note
			got, ok := auditEntryOf(tc.method, tc.pattern, func(k string) string { return tc.params[k] }, &note, tc.status, []byte(tc.answer))
			switch {
			case tc.want == nil && ok:
				t.Fatalf("recorded %+v, want it left out", got)
			case tc.want != nil && !ok:
				t.Fatal("left out, want it recorded")
			case tc.want != nil && got != *tc.want:
				t.Fatalf("entry\n got %+v\nwant %+v", got, *tc.want)
			}
		})
	}
}
