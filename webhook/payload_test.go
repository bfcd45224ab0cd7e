package webhook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestParsePayload(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		provider string
		body     []byte
		want     Push
		wantErr  string
	}{
		{name: "github", provider: ProviderGitHub, body: fixture(t, "github-push.json"), want: Push{
			Provider: "github", Ref: "refs/heads/main", After: "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c",
			RepoURLs: []string{"https://github.com/example-ops/config.git", "git@github.com:example-ops/config.git",
				"git://github.com/example-ops/config.git", "https://github.com/example-ops/config"},
		}},
		{name: "gitlab", provider: ProviderGitLab, body: fixture(t, "gitlab-push.json"), want: Push{
			Provider: "gitlab", Ref: "refs/heads/main", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			RepoURLs: []string{"git@gitlab.example.com:ops/config.git", "https://gitlab.example.com/ops/config.git",
				"https://gitlab.example.com/ops/config"},
		}},
		{name: "gitea", provider: ProviderGitea, body: fixture(t, "gitea-push.json"), want: Push{
			Provider: "gitea", Ref: "refs/heads/main", After: "bffeb74224043ba2feb48d137756c8a9331c449a",
			RepoURLs: []string{"https://git.example.com/ops/config.git", "ssh://git@git.example.com:2222/ops/config.git",
				"https://git.example.com/ops/config"},
		}},
		{name: "generic short ref", provider: ProviderGeneric, body: fixture(t, "generic-push.json"), want: Push{
			Provider: "generic", Ref: "refs/heads/main", After: "bffeb74224043ba2feb48d137756c8a9331c449a",
			RepoURLs: []string{"https://git.example.com/ops/config.git"},
		}},
		{name: "deleted branch", provider: ProviderGitHub,
			body: []byte(`{"ref":"refs/heads/old","after":"0000000000000000000000000000000000000000","repository":{"clone_url":"https://h/r.git"}}`),
			want: Push{Provider: "github", Ref: "refs/heads/old", RepoURLs: []string{"https://h/r.git"}}},
		{name: "tag", provider: ProviderGitLab,
			body: []byte(`{"ref":"refs/tags/v1","project":{"git_http_url":"https://h/r.git"}}`),
			want: Push{Provider: "gitlab", Ref: "refs/tags/v1", RepoURLs: []string{"https://h/r.git"}}},
		{name: "credentials removed", provider: ProviderGeneric,
			body: []byte(`{"repository":"https://user:tok3n@h/r.git","ref":"main"}`),
			want: Push{Provider: "generic", Ref: "refs/heads/main", RepoURLs: []string{"https://h/r.git"}}},
		{name: "ssh user kept, password removed", provider: ProviderGitHub,
			body: []byte(`{"ref":"refs/heads/main","repository":{"ssh_url":"ssh://git:pw@h/r.git","clone_url":"ssh://git@h/r.git"}}`),
			want: Push{Provider: "github", Ref: "refs/heads/main", RepoURLs: []string{"ssh://git@h/r.git"}}},
		{name: "not json", provider: ProviderGitHub, body: []byte("ref=main"), wantErr: "decode json"},
		{name: "empty", provider: ProviderGitea, body: nil, wantErr: "decode json"},
		{name: "no repository", provider: ProviderGitHub, body: []byte(`{"ref":"refs/heads/main"}`), wantErr: "no repository url"},
		{name: "no ref", provider: ProviderGeneric, body: []byte(`{"repository":"https://h/r.git"}`), wantErr: "no ref"},
		{name: "bad ref", provider: ProviderGitHub, body: []byte(`{"ref":"main","repository":{"clone_url":"https://h/r.git"}}`), wantErr: "not a valid full ref"},
		{name: "bad after", provider: ProviderGeneric, body: []byte(`{"repository":"https://h/r.git","ref":"main","after":"; rm -rf /"}`), wantErr: "not a commit id"},
		{name: "url with newline", provider: ProviderGeneric, body: []byte(`{"repository":"https://h/r.git\nX-Evil: 1","ref":"main"}`), wantErr: "control characters"},
		{name: "wrong type", provider: ProviderGitHub, body: []byte(`{"ref":1}`), wantErr: "decode json"},
		{name: "unknown provider", provider: "bitbucket", body: []byte(`{}`), wantErr: "unknown provider"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePayload(tc.provider, tc.body)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Provider != tc.want.Provider || got.Ref != tc.want.Ref || got.After != tc.want.After ||
				!slices.Equal(got.RepoURLs, tc.want.RepoURLs) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePayloadBoundsURLs(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"ref":"refs/heads/main","repository":{`)
	for i, k := range []string{"clone_url", "ssh_url", "html_url", "git_url", "url", "git_http_url", "git_ssh_url", "http_url", "web_url", "homepage"} {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:%q", k, fmt.Sprintf("https://h/%d.git", i))
	}
	b.WriteString(`},"project":{"clone_url":"https://p/1.git","homepage":"https://p/2.git","web_url":"https://p/3.git","url":"https://p/4.git","ssh_url":"https://p/5.git","http_url":"https://p/6.git","git_url":"https://p/7.git"}}`)
	p, err := ParsePayload(ProviderGitHub, []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.RepoURLs) != maxURLs {
		t.Fatalf("kept %d urls, want the cap of %d", len(p.RepoURLs), maxURLs)
	}
	long := `{"repository":"https://h/` + strings.Repeat("a", maxURLLength) + `","ref":"main"}`
	if _, err := ParsePayload(ProviderGeneric, []byte(long)); err == nil {
		t.Fatal("an over-long url was accepted")
	}
}

// FuzzParsePayload feeds arbitrary bodies to every provider's parser: it must
// never panic, and what it accepts must respect the bounds.
func FuzzParsePayload(f *testing.F) {
	for _, name := range []string{"github-push.json", "github-ping.json", "gitlab-push.json", "gitea-push.json", "generic-push.json"} {
		f.Add(fixture(f, name))
	}
	f.Add([]byte(`{"ref":"refs/heads/main","after":"00","repository":{"clone_url":"x"},"project":null}`))
	f.Add([]byte(`{"repository":"x","ref":"refs/tags/v1"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > DefaultMaxBodyBytes {
			return // the handler refuses these before parsing
		}
		for _, provider := range []string{ProviderGitHub, ProviderGitLab, ProviderGitea, ProviderGeneric} {
			p, err := ParsePayload(provider, body)
			if err != nil {
				continue
			}
			if len(p.RepoURLs) == 0 || len(p.RepoURLs) > maxURLs || !strings.HasPrefix(p.Ref, "refs/") ||
				len(p.Ref) > maxRefLength || len(p.After) > 64 || p.Provider != provider {
				t.Fatalf("%s accepted out-of-bounds push %+v", provider, p)
			}
			for _, u := range p.RepoURLs {
				if u == "" || len(u) > maxURLLength || strings.ContainsAny(u, "\x00\r\n") {
					t.Fatalf("%s accepted bad url %q", provider, u)
				}
				_ = p.Matches(u, "main") // RepoKey must not panic on any accepted url
			}
		}
	})
}

// pushOf10KiB returns a GitHub push payload padded to about 10 KiB with
// more commits, as a push of several commits is.
func pushOf10KiB(tb testing.TB) []byte {
	tb.Helper()
	body := fixture(tb, "github-push.json")
	commit := bytes.TrimSpace(body[bytes.Index(body, []byte(`"commits": [`))+len(`"commits": [`) : bytes.Index(body, []byte(`],
  "head_commit"`))])
	var commits [][]byte
	for len(body)+len(bytes.Join(commits, []byte(","))) < 10<<10 {
		commits = append(commits, commit)
	}
	return bytes.Replace(body, commit, bytes.Join(commits, []byte(",")), 1)
}

// BenchmarkVerifyAndParse measures the work of one GitHub push of about
// 10 KiB: signature check plus payload parse.
func BenchmarkVerifyAndParse(b *testing.B) {
	body := pushOf10KiB(b)
	secret := []byte(testSecret)
	h := http.Header{}
	h.Set(headerGitHubSignature, Sign(secret, body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if rej := verify(ProviderGitHub, h, body, secret); rej != nil {
			b.Fatal(rej)
		}
		if _, err := ParsePayload(ProviderGitHub, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandlerHTTP measures one signed ~10 KiB GitHub push through a
// real HTTP server and the whole handler, dispatch included.
func BenchmarkHandlerHTTP(b *testing.B) {
	body := pushOf10KiB(b)
	h, err := NewHandler(HandlerConfig{Secret: StaticSecret([]byte(testSecret)), Dispatcher: &countingSources{},
		RateLimit: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	sig := Sign([]byte(testSecret), body)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1alpha1/webhooks/github", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set(headerGitHubSignature, sig)
		req.Header.Set(headerGitHubEvent, "push")
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// countingSources matches every push, without recording it.
type countingSources struct{}

func (countingSources) DispatchPush(context.Context, Push) (int, error) { return 1, nil }
