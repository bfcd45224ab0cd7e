package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

const token = "test-admin-token"

type fixture struct {
	srv *httptest.Server
	// handler is the server's handler, for benchmarks that leave out TLS.
	handler http.Handler
	client  *apiclient.Client
	repo    *resources.Repo
	st      store.StateStore
	// agent is the node agent's server of newAgentFixture.
	agent *httptest.Server
}

func newFixture(t testing.TB, mod func(*apiserver.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	st := storetest.New(t)
	repo := resources.New(st)
	cfg, err := quadlet.ParseClusterConfiguration("cluster.kat", []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: ClusterConfiguration
metadata: {name: test}
spec: {clusterCIDR: 10.100.0.0/16, serviceCIDR: 10.96.0.0/16}
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.InitCluster(ctx, resources.ClusterInit{UID: "uid", Config: *cfg, AdminToken: token, JoinToken: "j"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"default", "kat-core"} {
		if _, err := repo.EnsureNamespace(ctx, ns, nil); err != nil {
			t.Fatal(err)
		}
	}
	sc := apiserver.Config{Repo: repo, AdminTokenHash: resources.HashToken(token), RateLimit: -1}
	if mod != nil {
		mod(&sc)
	}
	s, err := apiserver.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	// HTTP/2 on, as a real server has it: katcall's upgrades (exec) must
	// still be HTTP/1.1.
	h := s.Handler()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := apiclient.New(apiclient.Config{Server: srv.URL, Token: token, CAData: caPEM})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, handler: h, client: c, repo: repo, st: st}
}

// raw sends a request with the given bearer token ("" for none) and a body
// of the media type its endpoint takes.
func (f *fixture) raw(t *testing.T, method, path, bearer string, body []byte) (int, api.Error) {
	t.Helper()
	ct := ""
	switch {
	case method == http.MethodGet || method == http.MethodDelete:
	case strings.Contains(path, "/workloads"):
		ct = "application/gzip"
	case strings.Contains(path, "/namespaces"):
		ct = "application/yaml"
	default:
		ct = "application/json"
	}
	return f.rawType(t, method, path, bearer, ct, body)
}

// rawType sends a request with the given bearer token and Content-Type ("" for
// none of either).
func (f *fixture) rawType(t *testing.T, method, path, bearer, contentType string, body []byte) (int, api.Error) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.Error
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(b, &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("%s %s: error body is not {error, message}: %s", method, path, b)
		}
	}
	return resp.StatusCode, e
}

// header answers GET path with the admin token and returns the answer's
// status and header, its body read.
func (f *fixture) header(t *testing.T, path string) (int, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header
}

// snapshot returns every key and value under /kat/ but the audit log
// (which records refused requests too), to prove that refused requests
// change nothing.
func (f *fixture) snapshot(t *testing.T) string {
	t.Helper()
	kvs, err := f.st.List(context.Background(), "/kat/")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, resources.AuditPrefix()) {
			continue
		}
		fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value)
	}
	return b.String()
}

func archiveOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	m := map[string][]byte{}
	for k, v := range files {
		m[k] = []byte(v)
	}
	var buf bytes.Buffer
	if err := quadlet.WriteArchive(&buf, m); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func workloadKat(name, ns string, replicas int) string {
	nsLine := ""
	if ns != "" {
		nsLine = "\n  namespace: " + ns
	}
	return fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s%s
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: %d
  restartPolicy: {condition: Always}
  container: {command: [/bin/true]}
`, name, nsLine, replicas)
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	tests := []struct {
		name   string
		path   string
		bearer string
		want   int
	}{
		{name: "health needs no token", path: "/healthz", want: http.StatusOK},
		{name: "no token", path: "/v1alpha1/workloads", want: http.StatusUnauthorized},
		{name: "wrong token", path: "/v1alpha1/workloads", bearer: "nope", want: http.StatusUnauthorized},
		{name: "right token", path: "/v1alpha1/workloads", bearer: token, want: http.StatusOK},
		{name: "unknown endpoint", path: "/v1alpha1/nothing", bearer: token, want: http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, e := f.raw(t, http.MethodGet, tc.path, tc.bearer, nil); got != tc.want {
				t.Fatalf("status %d (%s), want %d", got, e.Message, tc.want)
			}
		})
	}
}

func TestWorkloadLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	arch := archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 2)})
	res, err := f.client.ApplyWorkload(ctx, "default", "", arch, apiclient.ApplyOptions{CreateOnly: true})
	if err != nil || !res.Created || res.Workload.Generation != 1 || res.Workload.Namespace != "default" {
		t.Fatalf("create: %+v, %v", res, err)
	}
	if res.Workload.Status.Desired != 2 || res.Workload.Status.Phase != "Pending" || res.Workload.Owner.Kind != "api" {
		t.Fatalf("status after create: %+v", res.Workload)
	}
	_, err = f.client.ApplyWorkload(ctx, "default", "", arch, apiclient.ApplyOptions{CreateOnly: true})
	if code := statusOf(err); code != http.StatusConflict {
		t.Fatalf("second POST: %v (status %d), want 409", err, code)
	}
	res, err = f.client.ApplyWorkload(ctx, "default", "web", arch, apiclient.ApplyOptions{})
	if err != nil || res.Changed || res.Workload.Generation != 1 {
		t.Fatalf("identical PUT: %+v, %v; want unchanged generation 1", res, err)
	}
	res, err = f.client.ApplyWorkload(ctx, "default", "web", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "default", 3)}), apiclient.ApplyOptions{})
	if err != nil || !res.Changed || res.Workload.Generation != 2 {
		t.Fatalf("changed PUT: %+v, %v; want generation 2", res, err)
	}
	file, err := f.client.GetWorkloadFile(ctx, "default", "web", "workload.kat")
	if err != nil || !strings.Contains(string(file), "replicas: 3") {
		t.Fatalf("files endpoint: %q, %v", file, err)
	}
	if _, err := f.client.GetWorkloadFile(ctx, "default", "web", "job.kat"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("missing file: %v", err)
	}
	ws, err := f.client.ListWorkloads(ctx, "")
	if err != nil || len(ws) != 1 || ws[0].SpecHash == "" {
		t.Fatalf("list: %+v, %v", ws, err)
	}
	if _, err := f.client.DeleteWorkload(ctx, "default", "web", false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.GetWorkload(ctx, "default", "web"); statusOf(err) != http.StatusNotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestRefusedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, func(c *apiserver.Config) { c.MaxArchiveBytes = 4 << 10 })
	if _, err := f.client.ApplyWorkload(ctx, "default", "web", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.ApplyWorkload(ctx, resources.ApplyRequest{
		Quadlet: mustParse(t, workloadKat("from-git", "", 1)),
		Owner:   api.Owner{Kind: api.OwnerGit, Source: "config", Path: "apps/from-git"},
	}); err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(t)
	big := make([]byte, 8<<10)
	tests := []struct {
		name, method, path string
		body               []byte
		want               int
		wantMsg            string
	}{
		{name: "not gzip", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/web", body: []byte("plain text"),
			want: http.StatusBadRequest, wantMsg: "invalid workload archive"},
		{name: "body over the limit", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/web", body: big,
			want: http.StatusRequestEntityTooLarge},
		{name: "empty body", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/web", want: http.StatusBadRequest},
		{name: "invalid quadlet", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/web",
			body: archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", -1)}),
			want: http.StatusUnprocessableEntity, wantMsg: "spec.replicas"},
		{name: "name differs from URL", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/other",
			body: archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 5)}),
			want: http.StatusUnprocessableEntity, wantMsg: "metadata.name"},
		{name: "namespace differs from URL", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/web",
			body: archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "kat-core", 5)}),
			want: http.StatusUnprocessableEntity, wantMsg: "metadata.namespace"},
		{name: "unknown namespace", method: http.MethodPut, path: "/v1alpha1/n/nowhere/workloads/web",
			body: archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 5)}),
			want: http.StatusNotFound, wantMsg: "nowhere"},
		{name: "invalid namespace in URL", method: http.MethodGet, path: "/v1alpha1/n/Bad_NS/workloads", want: http.StatusBadRequest},
		{name: "list in an unknown namespace", method: http.MethodGet, path: "/v1alpha1/n/nowhere/workloads",
			want: http.StatusNotFound, wantMsg: `namespace "nowhere"`},
		{name: "git-owned workload", method: http.MethodPut, path: "/v1alpha1/n/default/workloads/from-git",
			body: archiveOf(t, map[string]string{"workload.kat": workloadKat("from-git", "", 5)}),
			want: http.StatusConflict, wantMsg: "apps/from-git"},
		{name: "delete git-owned workload", method: http.MethodDelete, path: "/v1alpha1/n/default/workloads/from-git",
			want: http.StatusConflict, wantMsg: "apps/from-git"},
		{name: "bad force value", method: http.MethodDelete, path: "/v1alpha1/n/default/workloads/web?force=maybe",
			want: http.StatusBadRequest, wantMsg: "force"},
		{name: "delete protected namespace", method: http.MethodDelete, path: "/v1alpha1/namespaces/default",
			want: http.StatusConflict},
		{name: "delete non-empty namespace", method: http.MethodPost, path: "/v1alpha1/namespaces",
			body: []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {name: default}\n"), want: http.StatusConflict},
		{name: "namespace with unknown field", method: http.MethodPost, path: "/v1alpha1/namespaces",
			body: []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {name: x, colour: red}\n"),
			want: http.StatusUnprocessableEntity, wantMsg: "colour"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, e := f.raw(t, tc.method, tc.path, token, tc.body)
			if got != tc.want || !strings.Contains(e.Message, tc.wantMsg) {
				t.Fatalf("status %d %q, want %d containing %q", got, e.Message, tc.want, tc.wantMsg)
			}
		})
	}
	if after := f.snapshot(t); after != before {
		t.Fatalf("refused requests changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestInvalidQuadletDetails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	_, err := f.client.ApplyWorkload(context.Background(), "default", "web",
		archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", -1)}), apiclient.ApplyOptions{})
	var e *api.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusUnprocessableEntity || len(e.Details) == 0 {
		t.Fatalf("err = %v, want a 422 with details", err)
	}
	d := e.Details[0]
	if d.File != "workload.kat" || d.Field != "spec.replicas" || d.Line == 0 {
		t.Fatalf("detail = %+v, want file workload.kat, field spec.replicas and a line", d)
	}
}

// TestInvalidCorpusOverHTTP replays the quadlet package's invalid corpus
// through the API: every case is a 422 (or 400 for a broken file set) naming
// the file and field, and nothing is stored.
func TestInvalidCorpusOverHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	before := f.snapshot(t)
	dir := filepath.Join("..", "quadlet", "testdata", "invalid")
	wants, _ := filepath.Glob(filepath.Join(dir, "*.want"))
	if len(wants) == 0 {
		t.Fatal("no invalid corpus")
	}
	for _, w := range wants {
		name := strings.TrimSuffix(filepath.Base(w), ".want")
		t.Run(name, func(t *testing.T) {
			want, _ := os.ReadFile(w)
			files, err := quadlet.ReadDir(filepath.Join(dir, name), quadlet.DefaultLimits)
			if err != nil {
				t.Skipf("not a readable directory case: %v", err)
			}
			var buf bytes.Buffer
			if err := quadlet.WriteArchive(&buf, files); err != nil {
				t.Fatal(err)
			}
			code, e := f.raw(t, http.MethodPut, "/v1alpha1/n/default/workloads", token, buf.Bytes())
			if code != http.StatusUnprocessableEntity && code != http.StatusBadRequest && code != http.StatusNotFound {
				t.Fatalf("status %d, want 422", code)
			}
			if !strings.Contains(e.Message, strings.TrimSpace(string(want))) {
				t.Fatalf("message %q does not contain %q", e.Message, want)
			}
		})
	}
	if after := f.snapshot(t); after != before {
		t.Fatal("the invalid corpus changed the store")
	}
}

func TestNamespacesAndStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	doc := []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: team-a\n  labels: {owner: ops}\n")
	ns, err := f.client.CreateNamespace(ctx, doc)
	if err != nil || ns.Name != "team-a" || ns.Labels["owner"] != "ops" {
		t.Fatalf("create namespace: %+v, %v", ns, err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "team-a", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.client.DeleteNamespace(ctx, "team-a"); statusOf(err) != http.StatusConflict {
		t.Fatalf("delete non-empty namespace: %v", err)
	}
	st, err := f.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cluster.Name != "test" || len(st.Namespaces) != 3 || len(st.Workloads) != 1 || st.Phases["Pending"] != 1 {
		t.Fatalf("status = %+v", st)
	}
	cc, err := f.client.ClusterConfig(ctx)
	if err != nil || cc.UID != "uid" {
		t.Fatalf("cluster config: %+v, %v", cc, err)
	}
	raw, _ := json.Marshal(cc)
	if strings.Contains(string(raw), token) {
		t.Fatal("cluster config leaks the admin token")
	}
}

func TestNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	for name, seen := range map[string]time.Time{"fresh": time.Now(), "stale": time.Now().Add(-2 * time.Hour)} {
		if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: name, AdvertiseAddress: "10.0.0.1"}); err != nil {
			t.Fatal(err)
		}
		if err := f.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: name, Timestamp: seen.Unix()}); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := f.client.ListNodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes: %+v, %v", nodes, err)
	}
	if nodes[0].Name != "fresh" || nodes[0].Status != api.NodeReady || nodes[1].Status != api.NodeNotReady {
		t.Fatalf("nodes = %+v; want fresh Ready, stale NotReady", nodes)
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *apiserver.Config) { c.RateLimit = 3 })
	codes := map[int]int{}
	for range 10 {
		code, _ := f.raw(t, http.MethodGet, "/v1alpha1/workloads", token, nil)
		codes[code]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusOK] == 0 {
		t.Fatalf("10 quick requests with a limit of 3/s gave %v, want both 200 and 429", codes)
	}
}

func statusOf(err error) int {
	var e *api.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

func mustParse(t testing.TB, workload string) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{"workload.kat": []byte(workload)}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestAuthFailuresBlockTheAddress(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *apiserver.Config) { c.AuthFailureLimit = 3 })
	for i := range 3 {
		if code, _ := f.raw(t, http.MethodGet, "/v1alpha1/workloads", "guess", nil); code != http.StatusUnauthorized {
			t.Fatalf("wrong token #%d: status %d, want 401", i+1, code)
		}
	}
	// Past the limit even the right token is refused: a guess that happens to
	// be right must not be told so.
	code, e := f.raw(t, http.MethodGet, "/v1alpha1/workloads", token, nil)
	if code != http.StatusTooManyRequests || !strings.Contains(e.Message, "failed authentication") {
		t.Fatalf("after 3 failures: status %d %q, want 429", code, e.Message)
	}
	if code, _ := f.raw(t, http.MethodGet, "/healthz", "", nil); code != http.StatusOK {
		t.Fatalf("health endpoint blocked too: %d", code)
	}
}

// TestAuthFailuresBlockTheForwardedClient: through a member that forwards
// to the leader, the failures block the client the member names in
// X-Forwarded-For, not the member every other client shares; a peer that
// is no member cannot escape the blocking by naming another address.
func TestAuthFailuresBlockTheForwardedClient(t *testing.T) {
	t.Parallel()
	get := func(f *fixture, xff, bearer string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, f.srv.URL+"/v1alpha1/workloads", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+bearer)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name   string
		member bool
		// after three wrong tokens from 203.0.113.5: the right token from
		// that client, from another client, and from the peer itself
		want [3]int
	}{
		{"the peer is a member that forwards", true, [3]int{http.StatusTooManyRequests, http.StatusOK, http.StatusOK}},
		{"the peer is no member", false, [3]int{http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusTooManyRequests}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(c *apiserver.Config) {
				c.AuthFailureLimit = 3
				c.Forwarder = func(peer netip.Addr) bool { return tc.member && peer == netip.MustParseAddr("127.0.0.1") }
			})
			for i := range 3 {
				// A forwarded header may carry entries the client
				// wrote: the member's own (the last) counts.
				if code := get(f, "198.51.100.9, 203.0.113.5", "guess"); code != http.StatusUnauthorized {
					t.Fatalf("wrong token #%d: %d, want 401", i+1, code)
				}
			}
			got := [3]int{get(f, "203.0.113.5", token), get(f, "203.0.113.6", token), get(f, "", token)}
			if got != tc.want {
				t.Errorf("the right token from the blocked client, another client and the peer: %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClientRetriesWhenRateLimited(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *apiserver.Config) { c.RateLimit = 2 })
	for i := range 6 {
		if _, err := f.client.ListWorkloads(context.Background(), ""); err != nil {
			t.Fatalf("request %d: %v; the client should wait and retry on 429", i+1, err)
		}
	}
}

// TestRefusesUnacceptedContentType: a body whose Content-Type the endpoint
// does not take is refused with 415, naming what it takes, and changes
// nothing (a tar.gz sent as JSON used to be stored).
func TestRefusesUnacceptedContentType(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	arch := archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)})
	ns := []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {name: team}\n")
	tests := []struct {
		name, method, path, ct string
		body                   []byte
		want                   int
	}{
		{"archive as JSON", http.MethodPut, "/v1alpha1/n/default/workloads", "application/json", arch, http.StatusUnsupportedMediaType},
		{"archive without a type", http.MethodPost, "/v1alpha1/n/default/workloads", "", arch, http.StatusUnsupportedMediaType},
		{"archive as form", http.MethodPut, "/v1alpha1/n/default/workloads/web", "application/x-www-form-urlencoded", arch, http.StatusUnsupportedMediaType},
		{"namespace as JSON", http.MethodPost, "/v1alpha1/namespaces", "application/json", ns, http.StatusUnsupportedMediaType},
		{"source as YAML", http.MethodPut, "/v1alpha1/sources/apps", "application/yaml", []byte(`{"url":"file:///srv/x.git"}`), http.StatusUnsupportedMediaType},
		{"heartbeat as text", http.MethodPost, "/v1alpha1/nodes/n1/status", "text/plain", []byte(`{"nodeName":"n1"}`), http.StatusUnsupportedMediaType},
		{"a malformed type", http.MethodPut, "/v1alpha1/n/default/workloads", "application/", arch, http.StatusUnsupportedMediaType},
	}
	before := f.snapshot(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, e := f.rawType(t, tc.method, tc.path, token, tc.ct, tc.body)
			if code != tc.want || e.Code != api.CodeUnsupportedMediaType || !strings.Contains(e.Message, "application/") {
				t.Fatalf("%s %s as %q: %d %+v, want %d naming the accepted types", tc.method, tc.path, tc.ct, code, e, tc.want)
			}
		})
	}
	if after := f.snapshot(t); after != before {
		t.Fatal("a refused body changed the store")
	}
	// The accepted types, with parameters, go through.
	for _, ct := range []string{"application/gzip", "application/x-gzip", "application/octet-stream; charset=binary"} {
		if code, e := f.rawType(t, http.MethodPut, "/v1alpha1/n/default/workloads", token, ct, arch); code != http.StatusOK && code != http.StatusCreated {
			t.Errorf("archive as %q: %d %+v", ct, code, e)
		}
	}
}
