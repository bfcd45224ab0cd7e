package gitx

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx/gittest"
)

// history is a repository with four commits on main: zero (also the head
// of branch dev), bare (no ref points at it), first (annotated tag v1 and
// lightweight tag light) and second.
type history struct {
	*gittest.Repo
	zero, bare, first, second string
}

func newHistory(t *testing.T) *history {
	t.Helper()
	r := gittest.NewRepo(t, "app")
	h := &history{Repo: r}
	h.zero = r.Commit("zero", map[string]string{"README": "zero\n"})
	r.Git(r.Work, "push", "-q", "origin", "HEAD:refs/heads/dev")
	h.bare = r.Commit("bare", map[string]string{"README": "bare\n"})
	h.first = r.Commit("first", map[string]string{"Dockerfile": "FROM scratch\n"})
	r.Git(r.Work, "tag", "-a", "v1", "-m", "v1")
	r.Git(r.Work, "tag", "light")
	r.Git(r.Work, "push", "-q", "origin", "v1", "light")
	h.second = r.Commit("second", map[string]string{"index.html": "two\n"})
	return h
}

// TestResolve resolves refs against a real Git smart-HTTP server.
func TestResolve(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	srv := gittest.Serve(t, h.Repo, gittest.ServerOptions{})
	tests := []struct {
		name    string
		ref     Ref
		want    string
		wantErr string // with ErrRefNotFound
	}{
		{name: "branch", ref: Ref{Branch: "main"}, want: h.second},
		{name: "other branch", ref: Ref{Branch: "dev"}, want: h.zero},
		{name: "default branch", want: h.second},
		{name: "annotated tag peeled", ref: Ref{Tag: "v1"}, want: h.first},
		{name: "lightweight tag", ref: Ref{Tag: "light"}, want: h.first},
		{name: "short commit of a branch head", ref: Ref{Commit: h.second[:8]}, want: h.second},
		{name: "short commit in capitals", ref: Ref{Commit: strings.ToUpper(h.zero[:7])}, want: h.zero},
		{name: "missing branch", ref: Ref{Branch: "nope"}, wantErr: `resolve branch nope of ` + srv.RepoURL + `: gitx: ref not found: branch "nope"`},
		{name: "missing tag", ref: Ref{Tag: "v9"}, wantErr: `tag "v9"`},
		{name: "short commit of no ref", ref: Ref{Commit: h.bare[:8]}, wantErr: "give all 40 digits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(t.Context(), srv.RepoURL, api.GitAuth{}, tc.ref)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve = %v, %v; want ErrRefNotFound saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("Resolve = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// TestResolveWithoutAsking: a full commit needs no remote; a malformed one is
// refused before asking.
func TestResolveWithoutAsking(t *testing.T) {
	unreachable := "http://127.0.0.1:1/app.git"
	full := strings.Repeat("Ab", 20)
	got, err := Resolve(t.Context(), unreachable, api.GitAuth{}, Ref{Commit: full, Branch: "main"})
	if err != nil || got.String() != strings.ToLower(full) {
		t.Errorf("full commit: %v, %v", got, err)
	}
	for _, c := range []string{"abc", "zzzzzzzz", strings.Repeat("a", 41)} {
		_, err := Resolve(t.Context(), unreachable, api.GitAuth{}, Ref{Commit: c})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "hex digits") {
			t.Errorf("commit %q: %v, want ErrInvalid", c, err)
		}
	}
}

// TestListRefsAuth lists the refs of a server that wants HTTP basic auth,
// with credentials from a file, and without them; no error holds the
// password, which is also refused inside the URL.
func TestListRefsAuth(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	srv := gittest.Serve(t, h.Repo, gittest.ServerOptions{User: "alice", Password: "s3cret/pw"})
	dir := t.TempDir()
	good := api.GitAuth{BasicAuthFile: writeFile(t, dir, "basic", "alice:s3cret/pw\n")}
	refs, err := ListRefs(t.Context(), srv.RepoURL, good)
	if err != nil {
		t.Fatal(err)
	}
	names := map[plumbing.ReferenceName]string{}
	for _, r := range refs {
		names[r.Name()] = r.Hash().String()
	}
	if names["refs/heads/main"] != h.second || names["refs/tags/v1^{}"] != h.first || names["refs/tags/v1"] == h.first {
		t.Errorf("refs %v: want main at the second commit and v1 peeled to the first", names)
	}

	inURL := strings.Replace(srv.RepoURL, "http://", "http://alice:wrong%2Fpw@", 1)
	for name, tc := range map[string]struct {
		url  string
		auth api.GitAuth
	}{
		"anonymous":         {srv.RepoURL, api.GitAuth{}},
		"wrong password":    {srv.RepoURL, api.GitAuth{BasicAuthFile: writeFile(t, dir, "wrong", "alice:wrong/pw\n")}},
		"password in a URL": {inURL, api.GitAuth{}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ListRefs(t.Context(), tc.url, tc.auth)
			if err == nil {
				t.Fatal("listed the refs without the right credentials")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "list refs of "+srv.RepoURL+": ") || strings.Contains(msg, "wrong") || strings.Contains(msg, "s3cret") {
				t.Errorf("error %q: want it to start with the redacted URL and hold no password", msg)
			}
		})
	}
}

// TestListRefsCancelled: an operation that ends with its context matches the
// context's error.
func TestListRefsCancelled(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	srv := gittest.Serve(t, h.Repo, gittest.ServerOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ListRefs(ctx, srv.RepoURL, api.GitAuth{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ListRefs with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestPickRef(t *testing.T) {
	a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	refs := []*plumbing.Reference{
		plumbing.NewSymbolicReference(plumbing.HEAD, "refs/heads/trunk"),
		plumbing.NewHashReference("refs/heads/trunk", plumbing.NewHash(a)),
		plumbing.NewHashReference("refs/heads/dev", plumbing.NewHash(b)),
		plumbing.NewHashReference("refs/tags/light", plumbing.NewHash(b)),
		plumbing.NewHashReference("refs/tags/v1", plumbing.NewHash(c)),
		plumbing.NewHashReference("refs/tags/v1^{}", plumbing.NewHash(a)),
		plumbing.NewHashReference("refs/heads/ab1", plumbing.NewHash("ab1"+strings.Repeat("0", 37))),
		plumbing.NewHashReference("refs/heads/ab2", plumbing.NewHash("ab2"+strings.Repeat("0", 37))),
	}
	tests := []struct {
		name    string
		ref     Ref
		want    string
		wantErr string
	}{
		{name: "default branch follows HEAD", want: a},
		{name: "branch", ref: Ref{Branch: "dev"}, want: b},
		{name: "lightweight tag", ref: Ref{Tag: "light"}, want: b},
		{name: "annotated tag is peeled", ref: Ref{Tag: "v1"}, want: a},
		{name: "short commit", ref: Ref{Commit: "BBBBBBB"}, want: b},
		{name: "commit wins over branch", ref: Ref{Commit: "cccc", Branch: "dev"}, want: c},
		{name: "missing branch", ref: Ref{Branch: "nope"}, wantErr: `branch "nope"`},
		{name: "short commit of no ref", ref: Ref{Commit: "ddddddd"}, wantErr: "no branch or tag points at ddddddd"},
		{name: "ambiguous short commit", ref: Ref{Commit: "ab"}, wantErr: "ambiguous"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickRef(refs, tc.ref)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrRefNotFound) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("pickRef = %v, %v; want ErrRefNotFound saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("pickRef = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
	if _, err := pickRef(nil, Ref{}); !errors.Is(err, ErrRefNotFound) {
		t.Errorf("no HEAD: %v, want ErrRefNotFound", err)
	}
}

func TestRefString(t *testing.T) {
	for ref, want := range map[Ref]string{
		{}: "default branch", {Branch: "main"}: "branch main", {Tag: "v1"}: "tag v1", {Commit: "ABC123"}: "commit abc123",
	} {
		if got := ref.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", ref, got, want)
		}
	}
}
