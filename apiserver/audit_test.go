package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

const webhookSecret = "webhook-secret-value"

// auditFixture serves the API with webhooks (generic pushes of any
// repository match), joins that always succeed once the secret matched,
// and the audit log's lines in a buffer.
func auditFixture(t *testing.T, mod func(*apiserver.Config)) (*fixture, *testenv.SyncBuffer) {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	hooks, err := webhook.NewHandler(webhook.HandlerConfig{
		Secret:     webhook.StaticSecret([]byte(webhookSecret)),
		Dispatcher: webhook.DispatcherFunc(func(context.Context, webhook.Push) (int, error) { return 1, nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(c *apiserver.Config) {
		l := zerolog.New(logs).With().Str("component", "audit").Logger()
		c.AuditLogger = &l
		c.Webhooks = hooks
		c.Join = func(context.Context, api.JoinRequest) (*api.JoinResponse, error) { return &api.JoinResponse{}, nil }
		if mod != nil {
			mod(c)
		}
	})
	return f, logs
}

// postWebhook sends a generic push of repo, signed with secret.
func (f *fixture) postWebhook(t *testing.T, repo, secret string) int {
	t.Helper()
	body := fmt.Appendf(nil, `{"repository": %q, "ref": "refs/heads/main", "after": "%s"}`, repo, strings.Repeat("a", 40))
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1alpha1/webhooks/generic", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Kat-Signature", webhook.Sign([]byte(secret), body))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// auditLines renders entries as "actor verb object status error" lines.
func auditLines(es []api.AuditEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s %s %s %d", e.Actor, e.Verb, e.Object(), e.Status)
		if e.Detail != "" {
			fmt.Fprintf(&b, " [%s]", e.Detail)
		}
		if e.Error != "" {
			fmt.Fprintf(&b, " %q", e.Error)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestAuditRecordsWhoDidWhat drives the real API with the admin token, a
// node certificate, webhooks and joins, and reads the audit log back: one
// entry per mutating call with the credential's actor, refused calls with
// their status and message, reads and node heartbeats left out, and no
// token, secret or body anywhere in etcd or the log.
func TestAuditRecordsWhoDidWhat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, logs := auditFixture(t, nil)
	const marker = "body-marker-7f3a"
	wl := strings.Replace(workloadKat("web", "", 1), "command: [/bin/true]", "command: [/bin/true], env: [{name: MARK, value: "+marker+"}]", 1)
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": wl}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := workloadKat("broken", "", -1)
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": bad}), apiclient.ApplyOptions{}); statusOf(err) != http.StatusUnprocessableEntity {
		t.Fatalf("apply of an invalid workload: %v, want 422", err)
	}
	if _, err := f.client.ListWorkloads(ctx, ""); err != nil { // a read: not recorded
		t.Fatal(err)
	}
	if code, _ := f.raw(t, http.MethodDelete, "/v1alpha1/n/default/workloads/web", "wrong-token-value", nil); code != http.StatusUnauthorized {
		t.Fatalf("delete with a wrong token: %d, want 401", code)
	}
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	node := nodeClient(t, f, "n1")
	if err := node.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n1"}); err != nil { // a heartbeat: not recorded
		t.Fatal(err)
	}
	commit := strings.Repeat("b", 40)
	rec := fmt.Appendf(nil, `{"node": "n1", "namespace": "default", "workload": "web", "commit": %q}`, commit)
	if err := node.PutNodeBuildRecord(ctx, "n1", "default", "web", commit, rec); err != nil {
		t.Fatal(err)
	}
	if code := f.postWebhook(t, "https://git.example/team/app.git", webhookSecret); code != http.StatusAccepted {
		t.Fatalf("signed webhook: %d, want 202", code)
	}
	if code := f.postWebhook(t, "https://git.example/evil.git", "not-the-secret"); code != http.StatusUnauthorized {
		t.Fatalf("badly signed webhook: %d, want 401", code)
	}
	join := api.JoinRequest{Secret: "not-the-join-secret", NodeName: "n3", NodeUID: "u3", CSR: "csr", AdvertiseAddress: "10.0.0.3", AgentPort: 9116}
	body, _ := json.Marshal(join)
	if code, _ := f.raw(t, http.MethodPost, api.JoinPath, "", body); code != http.StatusForbidden {
		t.Fatalf("join with a wrong secret: %d, want 403", code)
	}
	join.Secret = "j"
	body, _ = json.Marshal(join)
	if code, e := f.raw(t, http.MethodPost, api.JoinPath, "", body); code != http.StatusOK {
		t.Fatalf("join: %d %s, want 200", code, e.Message)
	}
	if _, err := f.client.CordonNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.DeleteNode(ctx, "n2", false); err != nil {
		t.Fatal(err)
	}

	got, err := f.client.ListAudit(ctx, api.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := `admin apply workload/default/web 201
admin apply workload/default 422 "workload.kat:8: spec.replicas: must be at least 0, got -1"
anonymous delete workload/default/web 401 "invalid bearer token"
node:n1 report build/default/web 204 [` + commit + `]
webhook:generic push repo/https://git.example/team/app.git 202 [refs/heads/main]
webhook:generic push repo 401 "X-Kat-Signature does not match"
anonymous join node 403 "invalid join token: use the token kat-agent init printed (or katcall token rotate issued last)"
join-token join node/n3 200
admin cordon node/n1 200
admin delete node/n2 204
`
	if g := auditLines(got); g != want {
		t.Fatalf("audit log:\n%s\nwant:\n%s", g, want)
	}
	for _, e := range got {
		if e.Time.IsZero() || e.Remote != "127.0.0.1" {
			t.Fatalf("entry without time or remote address: %+v", e)
		}
	}

	kvs, err := f.st.List(ctx, resources.AuditPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var stored strings.Builder
	for _, kv := range kvs {
		stored.Write(kv.Value)
	}
	// The node's call went through nodeClient's server, which logs
	// elsewhere.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(got)-1 || !strings.Contains(lines[0], `"component":"audit"`) || !strings.Contains(lines[0], `"actor":"admin"`) {
		t.Fatalf("want one audit log line per entry (%d), got %d:\n%s", len(got)-1, len(lines), logs)
	}
	for _, secret := range []string{token, "wrong-token-value", webhookSecret, "not-the-join-secret", `"j"`, marker, "csr"} {
		if strings.Contains(stored.String(), secret) || strings.Contains(logs.String(), secret) {
			t.Fatalf("the audit log holds %q:\n%s\n%s", secret, stored.String(), logs)
		}
	}
}

// TestAuditQuery: filters by actor and object, the limit keeps the newest,
// and each bad parameter is a 400 naming it.
func TestAuditQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := auditFixture(t, nil)
	for _, n := range []string{"n1", "n2"} {
		if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: n}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.client.CordonNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := f.postWebhook(t, "https://git.example/a.git", webhookSecret); code != http.StatusAccepted {
		t.Fatalf("webhook: %d", code)
	}
	for _, tc := range []struct {
		name string
		q    api.AuditQuery
		want string
	}{
		{name: "all", want: "admin cordon node/n1 200\nadmin cordon node/n2 200\nadmin apply workload/default/web 201\nwebhook:generic push repo/https://git.example/a.git 202 [refs/heads/main]\n"},
		{name: "newest two", q: api.AuditQuery{Limit: 2}, want: "admin apply workload/default/web 201\nwebhook:generic push repo/https://git.example/a.git 202 [refs/heads/main]\n"},
		{name: "one kind", q: api.AuditQuery{Resource: "node"}, want: "admin cordon node/n1 200\nadmin cordon node/n2 200\n"},
		{name: "one object", q: api.AuditQuery{Resource: "node/n2"}, want: "admin cordon node/n2 200\n"},
		{name: "one namespace", q: api.AuditQuery{Resource: "workload/default/"}, want: "admin apply workload/default/web 201\n"},
		{name: "not a segment prefix", q: api.AuditQuery{Resource: "node/n"}, want: ""},
		{name: "actor", q: api.AuditQuery{Actor: "admin", Limit: 1}, want: "admin apply workload/default/web 201\n"},
		{name: "actor prefix", q: api.AuditQuery{Actor: "webhook:"}, want: "webhook:generic push repo/https://git.example/a.git 202 [refs/heads/main]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := f.client.ListAudit(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if g := auditLines(got); g != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", g, tc.want)
			}
		})
	}
	for _, tc := range []struct{ query, want string }{
		{"limit=0", `"limit"`}, {"limit=x", `"limit"`}, {"limit=1001", `"limit"`}, {"actor=", `"actor"`},
		{"resource=%0a", `"resource"`}, {"actr=admin", `"actr"`}, {"limit=1&limit=2", `"limit"`},
	} {
		t.Run("bad "+tc.query, func(t *testing.T) {
			code, e := f.raw(t, http.MethodGet, api.AuditPath+"?"+tc.query, token, nil)
			if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("status %d %q, want 400 naming %s", code, e.Message, tc.want)
			}
		})
	}
	if code, _ := f.raw(t, http.MethodGet, api.AuditPath, "", nil); code != http.StatusUnauthorized {
		t.Fatalf("audit log without the admin token: %d, want 401", code)
	}
	if _, err := nodeClient(t, f, "n1").ListAudit(ctx, api.AuditQuery{}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("audit log with a node certificate: %v, want 401", err)
	}
}

// TestAuditKeepsTheNewest: past AuditKeep entries the oldest go.
func TestAuditKeepsTheNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := auditFixture(t, func(c *apiserver.Config) { c.AuditKeep = 3 })
	for i := range 5 {
		if _, err := f.client.CreateNamespace(ctx, fmt.Appendf(nil, "apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {name: ns%d}\n", i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.client.ListAudit(ctx, api.AuditQuery{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if g, want := auditLines(got), "admin create namespace/ns2 201\nadmin create namespace/ns3 201\nadmin create namespace/ns4 201\n"; g != want {
		t.Fatalf("got:\n%s\nwant:\n%s", g, want)
	}
	if kvs, err := f.st.List(ctx, resources.AuditPrefix()); err != nil || len(kvs) != 3 {
		t.Fatalf("%d audit keys in etcd (%v), want 3", len(kvs), err)
	}
	if code, _ := f.raw(t, http.MethodGet, api.AuditPath+"?limit=4", token, nil); code != http.StatusBadRequest {
		t.Fatalf("limit above AuditKeep: %d, want 400", code)
	}
}

// failAudit is the real store, except that writes to the audit log fail.
type failAudit struct{ store.StateStore }

var errAuditDown = errors.New("audit keys unavailable")

func (s failAudit) Put(ctx context.Context, key string, value []byte) error {
	if strings.HasPrefix(key, resources.AuditPrefix()) {
		return errAuditDown
	}
	return s.StateStore.Put(ctx, key, value)
}

func (s failAudit) DoTransaction(ctx context.Context, checks []store.Compare, onSuccess, onFailure []store.Op) (bool, error) {
	if touchesAudit(onSuccess) || touchesAudit(onFailure) {
		return false, errAuditDown
	}
	return s.StateStore.DoTransaction(ctx, checks, onSuccess, onFailure)
}

func (s failAudit) Txn(ctx context.Context, checks []store.Compare, onSuccess, onFailure []store.Op) (*store.TxnResult, error) {
	if touchesAudit(onSuccess) || touchesAudit(onFailure) {
		return nil, errAuditDown
	}
	return s.StateStore.Txn(ctx, checks, onSuccess, onFailure)
}

// touchesAudit reports whether one of ops writes an audit key.
func touchesAudit(ops []store.Op) bool {
	return slices.ContainsFunc(ops, func(op store.Op) bool {
		return op.Type != store.OpGet && strings.HasPrefix(op.Key, resources.AuditPrefix())
	})
}

// TestAuditWriteFailureStillAnswers: when the entry cannot be stored, the
// call is answered as it would be and the failure is logged.
func TestAuditWriteFailureStillAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, logs := auditFixture(t, func(c *apiserver.Config) { c.Repo = resources.New(failAudit{c.Repo.Store()}) })
	if _, err := f.client.CreateNamespace(ctx, []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {name: team}\n")); err != nil {
		t.Fatalf("create with the audit log failing: %v", err)
	}
	if _, err := f.repo.GetNamespace(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "audit entry not stored in etcd") || !strings.Contains(logs.String(), errAuditDown.Error()) {
		t.Fatalf("the failure is not logged:\n%s", logs)
	}
}

// TestAuditUnauthenticatedAreBounded: past AuditUnauthenticatedLimit a
// minute, calls without a valid credential are only logged; the admin's
// calls are still stored.
func TestAuditUnauthenticatedAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, logs := auditFixture(t, func(c *apiserver.Config) { c.AuditUnauthenticatedLimit, c.AuthFailureLimit = 3, -1 })
	for range 5 {
		if code, _ := f.raw(t, http.MethodPost, "/v1alpha1/nodes/n1/cordon", "wrong-token-value", nil); code != http.StatusUnauthorized {
			t.Fatalf("cordon with a wrong token: %d, want 401", code)
		}
		if code := f.postWebhook(t, "https://git.example/evil.git", "not-the-secret"); code != http.StatusUnauthorized {
			t.Fatalf("badly signed webhook: %d, want 401", code)
		}
	}
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CordonNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.ListAudit(ctx, api.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := "anonymous cordon node/n1 401 \"invalid bearer token\"\nwebhook:generic push repo 401 \"X-Kat-Signature does not match\"\n" +
		"anonymous cordon node/n1 401 \"invalid bearer token\"\nadmin cordon node/n1 200\n"
	if g := auditLines(got); g != want {
		t.Fatalf("stored:\n%s\nwant:\n%s", g, want)
	}
	if n := strings.Count(logs.String(), `"message":"audit"`); n != 11 {
		t.Fatalf("%d audit log lines, want 11 (every call):\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), `"stored":false`); n != 7 {
		t.Fatalf("%d lines marked stored false, want 7:\n%s", n, logs)
	}
}
