package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/testenv"
)

const testSecret = "s3cr3t-webhook-value"

// fakeSources is a Dispatcher matching pushes of main to a fixed set of
// repository URLs, recording every push it sees.
type fakeSources struct {
	urls []string
	err  error
	wait bool // block until the context ends

	mu     sync.Mutex
	pushes []Push
}

func (f *fakeSources) DispatchPush(ctx context.Context, p Push) (int, error) {
	f.mu.Lock()
	f.pushes = append(f.pushes, p)
	f.mu.Unlock()
	if f.wait {
		<-ctx.Done()
		return 0, fmt.Errorf("wake source: %w", ctx.Err())
	}
	if f.err != nil {
		return 0, f.err
	}
	if p.Ref != "refs/heads/main" {
		return 0, nil
	}
	for _, u := range p.RepoURLs {
		if slices.Contains(f.urls, u) {
			return 1, nil
		}
	}
	return 0, nil
}

func (f *fakeSources) seen() []Push {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pushes)
}

var allSources = []string{
	"https://github.com/example-ops/config.git",
	"https://gitlab.example.com/ops/config.git",
	"ssh://git@git.example.com:2222/ops/config.git",
	"https://git.example.com/ops/config.git",
}

type testServer struct {
	url  string
	h    *Handler
	d    *fakeSources
	logs *testenv.SyncBuffer
}

// newServer serves a handler under chi at /v1alpha1/webhooks/{provider}, as
// the API mounts it.
func newServer(t *testing.T, cfg HandlerConfig, d *fakeSources) *testServer {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	if cfg.Secret == nil {
		cfg.Secret = StaticSecret([]byte(testSecret))
	}
	cfg.Dispatcher = d
	cfg.Logger = zerolog.New(logs)
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Handle("/v1alpha1/webhooks/{provider}", h)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &testServer{url: srv.URL + "/v1alpha1/webhooks/", h: h, d: d, logs: logs}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signed returns the headers a provider sends for body with secret.
func signed(provider, event string, secret, body []byte) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	switch provider {
	case ProviderGitHub:
		h.Set(headerGitHubSignature, Sign(secret, body))
		h.Set(headerGitHubEvent, event)
	case ProviderGitea:
		h.Set(headerGiteaSignature, strings.TrimPrefix(Sign(secret, body), "sha256="))
		h.Set(headerGiteaEvent, event)
	case ProviderGitLab:
		h.Set(headerGitLabToken, string(secret))
		h.Set(headerGitLabEvent, event)
	default:
		h.Set(headerKatSignature, Sign(secret, body))
	}
	return h
}

type response struct {
	status int
	body   map[string]any
}

func post(t *testing.T, method, url string, h http.Header, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		t.Fatalf("%s %s answered %d with a body that is not JSON: %q", method, url, resp.StatusCode, raw)
	}
	return out
}

type providerCase struct {
	provider  string
	fixture   string
	pushEvent string
	otherEvt  string // a verified event that is not a push
}

var providers = []providerCase{
	{ProviderGitHub, "github-push.json", "push", "issues"},
	{ProviderGitLab, "gitlab-push.json", "Push Hook", "Merge Request Hook"},
	{ProviderGitea, "gitea-push.json", "push", "pull_request"},
	{ProviderGeneric, "generic-push.json", "", ""},
}

func TestProviders(t *testing.T) {
	t.Parallel()
	for _, pc := range providers {
		t.Run(pc.provider, func(t *testing.T) {
			body := fixture(t, pc.fixture)
			secret := []byte(testSecret)
			wrongRef := bytes.Replace(body, []byte("refs/heads/main"), []byte("refs/heads/feature"), 1)
			if pc.provider == ProviderGeneric {
				wrongRef = bytes.Replace(body, []byte(`"main"`), []byte(`"feature"`), 1)
			}
			missing := signed(pc.provider, pc.pushEvent, secret, body)
			for _, k := range []string{headerGitHubSignature, headerGiteaSignature, headerGitLabToken, headerKatSignature} {
				missing.Del(k)
			}
			garbage := signed(pc.provider, pc.pushEvent, secret, body)
			for _, k := range []string{headerGitHubSignature, headerGiteaSignature, headerGitLabToken, headerKatSignature} {
				if garbage.Get(k) != "" {
					garbage.Set(k, "sha256=zz-not-hex")
				}
			}
			big := append(bytes.Repeat([]byte(" "), 2048), body...)
			malformed := []byte(`{"ref": "refs/heads/main", "repository": `)

			cases := []struct {
				name     string
				header   http.Header
				body     []byte
				sources  []string
				status   int
				outcome  Outcome
				dispatch bool
			}{
				{"valid", signed(pc.provider, pc.pushEvent, secret, body), body, allSources, http.StatusAccepted, OutcomeAccepted, true},
				{"wrong secret", signed(pc.provider, pc.pushEvent, []byte("not-the-secret"), body), body, allSources, http.StatusUnauthorized, OutcomeBadSignature, false},
				{"missing signature", missing, body, allSources, http.StatusUnauthorized, OutcomeMissingSignature, false},
				{"invalid signature", garbage, body, allSources, http.StatusUnauthorized, OutcomeBadSignature, false},
				{"body changed after signing", signed(pc.provider, pc.pushEvent, secret, body), wrongRef, allSources, http.StatusUnauthorized, OutcomeBadSignature, false},
				{"malformed json", signed(pc.provider, pc.pushEvent, secret, malformed), malformed, allSources, http.StatusBadRequest, OutcomeMalformed, false},
				{"oversized body", signed(pc.provider, pc.pushEvent, secret, big), big, allSources, http.StatusRequestEntityTooLarge, OutcomeTooLarge, false},
				{"no matching source", signed(pc.provider, pc.pushEvent, secret, body), body, []string{"https://elsewhere.example/x.git"}, http.StatusNotFound, OutcomeNoMatch, true},
				{"other branch", signed(pc.provider, pc.pushEvent, secret, wrongRef), wrongRef, allSources, http.StatusNotFound, OutcomeNoMatch, true},
			}
			if pc.provider == ProviderGitLab {
				// GitLab's token is not a MAC of the body: a changed body passes
				// verification and is only a hint anyway.
				cases[4].status, cases[4].outcome, cases[4].dispatch = http.StatusNotFound, OutcomeNoMatch, true
			}
			if pc.otherEvt != "" {
				cases = append(cases, struct {
					name     string
					header   http.Header
					body     []byte
					sources  []string
					status   int
					outcome  Outcome
					dispatch bool
				}{"other event ignored", signed(pc.provider, pc.otherEvt, secret, body), body, allSources, http.StatusOK, OutcomeIgnored, false})
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					srv := newServer(t, HandlerConfig{MaxBodyBytes: int64(len(body) + 1024)}, &fakeSources{urls: tc.sources})
					got := post(t, http.MethodPost, srv.url+pc.provider, tc.header, tc.body)
					if got.status != tc.status {
						t.Fatalf("status = %d %v, want %d", got.status, got.body, tc.status)
					}
					if tc.status >= 400 && (got.body["error"] == "" || got.body["message"] == "") {
						t.Errorf("error body %v lacks error or message", got.body)
					}
					if n := len(srv.d.seen()); (n > 0) != tc.dispatch {
						t.Errorf("dispatched %d pushes, want dispatch=%v", n, tc.dispatch)
					}
					if n := srv.h.Stats().Get(pc.provider, tc.outcome); n != 1 {
						t.Errorf("count of %s/%s = %d, want 1 (stats %+v)", pc.provider, tc.outcome, n, srv.h.Stats())
					}
					logs := srv.logs.String()
					if strings.Contains(logs, testSecret) || strings.Contains(logs, "sha256=") {
						t.Errorf("log holds the secret or a signature: %s", logs)
					}
					if tc.status >= 400 && strings.Count(logs, "webhook rejected") != 1 {
						t.Errorf("want exactly one rejection line, logs: %s", logs)
					}
					if tc.status >= 400 && !strings.Contains(logs, `"reason":"`+string(tc.outcome)+`"`) {
						t.Errorf("log does not name reason %s: %s", tc.outcome, logs)
					}
				})
			}
		})
	}
}

func TestGitHubPing(t *testing.T) {
	t.Parallel()
	srv := newServer(t, HandlerConfig{}, &fakeSources{urls: allSources})
	body := fixture(t, "github-ping.json")
	got := post(t, http.MethodPost, srv.url+"github", signed(ProviderGitHub, "ping", []byte(testSecret), body), body)
	if got.status != http.StatusOK || got.body["status"] != "pong" {
		t.Fatalf("ping answered %d %v, want 200 pong", got.status, got.body)
	}
	if len(srv.d.seen()) != 0 {
		t.Fatal("ping was dispatched")
	}
	// A ping with a bad signature is still refused.
	got = post(t, http.MethodPost, srv.url+"github", signed(ProviderGitHub, "ping", []byte("wrong"), body), body)
	if got.status != http.StatusUnauthorized {
		t.Fatalf("badly signed ping answered %d, want 401", got.status)
	}
}

func TestForgejoHeaders(t *testing.T) {
	t.Parallel()
	srv := newServer(t, HandlerConfig{}, &fakeSources{urls: allSources})
	body := fixture(t, "gitea-push.json")
	h := http.Header{}
	h.Set(headerForgejoSignature, strings.TrimPrefix(Sign([]byte(testSecret), body), "sha256="))
	h.Set(headerForgejoEvent, "push")
	if got := post(t, http.MethodPost, srv.url+"gitea", h, body); got.status != http.StatusAccepted {
		t.Fatalf("forgejo push answered %d %v, want 202", got.status, got.body)
	}
}

func TestRequestRefusals(t *testing.T) {
	t.Parallel()
	body := fixture(t, "generic-push.json")
	good := signed(ProviderGeneric, "", []byte(testSecret), body)
	cases := []struct {
		name     string
		cfg      HandlerConfig
		d        *fakeSources
		method   string
		provider string
		status   int
		label    string
		outcome  Outcome
	}{
		{"unknown provider", HandlerConfig{}, &fakeSources{urls: allSources}, http.MethodPost, "bitbucket", http.StatusBadRequest, "unknown", OutcomeUnknownProvider},
		{"get", HandlerConfig{}, &fakeSources{urls: allSources}, http.MethodGet, "generic", http.StatusMethodNotAllowed, "generic", OutcomeMethodNotAllowed},
		{"empty secret", HandlerConfig{Secret: StaticSecret(nil)}, &fakeSources{urls: allSources}, http.MethodPost, "generic", http.StatusUnauthorized, "generic", OutcomeNoSecret},
		{"unreadable secret", HandlerConfig{Secret: SecretFile(filepath.Join(t.TempDir(), "missing"))}, &fakeSources{urls: allSources}, http.MethodPost, "generic", http.StatusServiceUnavailable, "generic", OutcomeSecretUnavailable},
		{"dispatcher error", HandlerConfig{}, &fakeSources{err: errors.New("store: not leader")}, http.MethodPost, "generic", http.StatusServiceUnavailable, "generic", OutcomeDispatchFailed},
		{"dispatcher timeout", HandlerConfig{DispatchTimeout: 50 * time.Millisecond}, &fakeSources{wait: true}, http.MethodPost, "generic", http.StatusServiceUnavailable, "generic", OutcomeDispatchFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.cfg, tc.d)
			got := post(t, tc.method, srv.url+tc.provider, good.Clone(), body)
			if got.status != tc.status {
				t.Fatalf("status = %d %v, want %d", got.status, got.body, tc.status)
			}
			if n := srv.h.Stats().Get(tc.label, tc.outcome); n != 1 {
				t.Errorf("count of %s/%s = %d, want 1 (stats %+v)", tc.label, tc.outcome, n, srv.h.Stats())
			}
			if msg, _ := got.body["message"].(string); strings.Contains(msg, "not leader") {
				t.Errorf("message leaks the dispatcher's error: %q", msg)
			}
		})
	}
}

func TestEmptySecretRefusesUnsigned(t *testing.T) {
	t.Parallel()
	srv := newServer(t, HandlerConfig{Secret: StaticSecret(nil)}, &fakeSources{urls: allSources})
	body := fixture(t, "gitlab-push.json")
	h := http.Header{}
	h.Set(headerGitLabToken, "")
	h.Set(headerGitLabEvent, "Push Hook")
	if got := post(t, http.MethodPost, srv.url+"gitlab", h, body); got.status != http.StatusUnauthorized {
		t.Fatalf("unsigned push with no secret configured answered %d, want 401", got.status)
	}
	if len(srv.d.seen()) != 0 {
		t.Fatal("an unsigned push was dispatched")
	}
}

func TestRotatedSecretFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "webhook.secret")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, HandlerConfig{Secret: SecretFile(file)}, &fakeSources{urls: allSources})
	body := fixture(t, "generic-push.json")
	if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("first"), body), body); got.status != http.StatusAccepted {
		t.Fatalf("push with the first secret answered %d %v", got.status, got.body)
	}
	if err := os.WriteFile(file, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("first"), body), body); got.status != http.StatusUnauthorized {
		t.Fatalf("push with the rotated-out secret answered %d, want 401", got.status)
	}
	if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("second"), body), body); got.status != http.StatusAccepted {
		t.Fatalf("push with the new secret answered %d %v", got.status, got.body)
	}
	// A file that becomes empty (half-written) or disappears keeps the
	// last good secret.
	for _, bad := range []func(){
		func() { _ = os.WriteFile(file, nil, 0o600) },
		func() { _ = os.Remove(file) },
	} {
		bad()
		if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("second"), body), body); got.status != http.StatusAccepted {
			t.Fatalf("push with the last good secret answered %d %v", got.status, got.body)
		}
	}
	// An atomic replace of the same size: the new secret at once.
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte("third \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("second"), body), body); got.status != http.StatusUnauthorized {
		t.Fatalf("push with the replaced secret answered %d, want 401", got.status)
	}
	if got := post(t, http.MethodPost, srv.url+"generic", signed(ProviderGeneric, "", []byte("third"), body), body); got.status != http.StatusAccepted {
		t.Fatalf("push with the new secret answered %d %v", got.status, got.body)
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	// An hour-long window: the test never crosses a window boundary that
	// could let a request through.
	srv := newServer(t, HandlerConfig{RateLimit: 3, RateWindow: time.Hour}, &fakeSources{urls: allSources})
	body := fixture(t, "generic-push.json")
	h := signed(ProviderGeneric, "", []byte(testSecret), body)
	for i := range 3 {
		if got := post(t, http.MethodPost, srv.url+"generic", h.Clone(), body); got.status != http.StatusAccepted {
			t.Fatalf("request %d answered %d %v, want 202", i, got.status, got.body)
		}
	}
	got := post(t, http.MethodPost, srv.url+"generic", h.Clone(), body)
	if got.status != http.StatusTooManyRequests || got.body["error"] != api.CodeRateLimited {
		t.Fatalf("fourth request answered %d %v, want 429 rate_limited", got.status, got.body)
	}
	// Rate limiting comes before verification: a bad signature is limited too.
	got = post(t, http.MethodPost, srv.url+"github", http.Header{}, body)
	if got.status != http.StatusTooManyRequests {
		t.Fatalf("unsigned request over the limit answered %d, want 429", got.status)
	}
	st := srv.h.Stats()
	if st.Get("generic", OutcomeRateLimited) != 1 || st.Get("github", OutcomeRateLimited) != 1 || st.Get("generic", OutcomeAccepted) != 3 {
		t.Fatalf("stats %+v, want 3 accepted and 1 limited for generic, 1 limited for github", st)
	}
	// A flood is counted in full but logged sampled.
	for range 30 {
		post(t, http.MethodPost, srv.url+"generic", h.Clone(), body)
	}
	if n := srv.h.Stats().Get("generic", OutcomeRateLimited); n != 31 {
		t.Fatalf("counted %d rate-limited generic requests, want 31", n)
	}
	if n := strings.Count(srv.logs.String(), `"reason":"rate_limited"`); n > 10 {
		t.Fatalf("logged %d rate-limited requests, want at most 10", n)
	}
}

func TestProviderFromPathWithoutChi(t *testing.T) {
	t.Parallel()
	d := &fakeSources{urls: allSources}
	h, err := NewHandler(HandlerConfig{Secret: StaticSecret([]byte(testSecret)), Dispatcher: d,
		Now: func() time.Time { return time.Unix(1700000000, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/hooks/", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	body := fixture(t, "github-push.json")
	if got := post(t, http.MethodPost, srv.URL+"/hooks/github", signed(ProviderGitHub, "push", []byte(testSecret), body), body); got.status != http.StatusAccepted {
		t.Fatalf("answered %d %v, want 202", got.status, got.body)
	}
	if got := h.Stats().LastAccepted; !got.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("LastAccepted = %v, want the injected clock's time", got)
	}
}

func TestNewHandlerNeedsSecretAndDispatcher(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(HandlerConfig{Dispatcher: &fakeSources{}}); err == nil {
		t.Error("no error without a Secret")
	}
	if _, err := NewHandler(HandlerConfig{Secret: StaticSecret([]byte("x"))}); err == nil {
		t.Error("no error without a Dispatcher")
	}
}

// TestProviderUnderChiWildcard mounts the handler the way a router without
// a {provider} parameter does: the provider comes from the last segment.
func TestProviderUnderChiWildcard(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(HandlerConfig{Secret: StaticSecret([]byte(testSecret)), Dispatcher: &fakeSources{urls: allSources}})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Handle("/v1alpha1/webhooks/*", h)
	srv := httptest.NewServer(r)
	defer srv.Close()
	body := fixture(t, "gitlab-push.json")
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/v1alpha1/webhooks/gitlab", http.StatusAccepted},
		{"/v1alpha1/webhooks/gitlab/", http.StatusAccepted},
		{"/v1alpha1/webhooks/", http.StatusBadRequest},
		{"/v1alpha1/webhooks/gitlab/extra", http.StatusBadRequest},
	} {
		if got := post(t, http.MethodPost, srv.URL+tc.path, signed(ProviderGitLab, "Push Hook", []byte(testSecret), body), body); got.status != tc.status {
			t.Errorf("POST %s answered %d %v, want %d", tc.path, got.status, got.body, tc.status)
		}
	}
}

// TestFormEncodedPush: GitHub and Gitea hooks set to the form content type
// send the JSON in a "payload" field, signed over the form.
func TestFormEncodedPush(t *testing.T) {
	t.Parallel()
	for _, pc := range []providerCase{providers[0], providers[2]} {
		t.Run(pc.provider, func(t *testing.T) {
			srv := newServer(t, HandlerConfig{}, &fakeSources{urls: allSources})
			form := []byte(url.Values{"payload": {string(fixture(t, pc.fixture))}}.Encode())
			h := signed(pc.provider, pc.pushEvent, []byte(testSecret), form)
			h.Set("Content-Type", "application/x-www-form-urlencoded")
			if got := post(t, http.MethodPost, srv.url+pc.provider, h, form); got.status != http.StatusAccepted {
				t.Fatalf("form push answered %d %v, want 202", got.status, got.body)
			}
			bad := []byte("nopayload=1")
			h = signed(pc.provider, pc.pushEvent, []byte(testSecret), bad)
			h.Set("Content-Type", "application/x-www-form-urlencoded")
			if got := post(t, http.MethodPost, srv.url+pc.provider, h, bad); got.status != http.StatusBadRequest {
				t.Fatalf("form without payload answered %d %v, want 400", got.status, got.body)
			}
		})
	}
}
