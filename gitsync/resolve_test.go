package gitsync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

func TestResolveRef(t *testing.T) {
	r := newTestRemote(t)
	r.WriteFile("README", []byte("zero\n"))
	zero := r.Commit("zero", nil)
	r.WriteFile("Dockerfile", []byte("FROM scratch\n"))
	first := r.Commit("first", nil)
	r.Git(r.Work, "tag", "-a", "v1", "-m", "v1")
	r.Git(r.Work, "push", "-q", "origin", "v1")
	r.WriteFile("index.html", []byte("two\n"))
	second := r.Commit("second", nil)
	_, url := newGitServer(t, r)
	ctx := context.Background()
	tests := []struct {
		name    string
		git     quadlet.GitSource
		want    string
		wantErr string
	}{
		{name: "branch", git: quadlet.GitSource{Branch: "main"}, want: second},
		{name: "default branch", git: quadlet.GitSource{}, want: second},
		{name: "annotated tag peeled", git: quadlet.GitSource{Tag: "v1"}, want: first},
		{name: "full commit as is", git: quadlet.GitSource{Commit: strings.ToUpper(first)}, want: first},
		{name: "short commit of a ref", git: quadlet.GitSource{Commit: second[:8]}, want: second},
		{name: "missing branch", git: quadlet.GitSource{Branch: "nope"}, wantErr: `branch "nope"`},
		{name: "missing tag", git: quadlet.GitSource{Tag: "v9"}, wantErr: `tag "v9"`},
		{name: "short commit of no ref", git: quadlet.GitSource{Commit: zero[:8]}, wantErr: "give all 40 digits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.git
			g.Repository = url
			got, err := ResolveRef(ctx, g, resources.SourceAuth{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrRefNotFound) {
					t.Fatalf("err = %v, want ErrRefNotFound containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveRef = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestResolveRefRedactsCredentials(t *testing.T) {
	g := quadlet.GitSource{Repository: "http://user:s3cret@127.0.0.1:1/app.git", Branch: "main"}
	_, err := ResolveRef(context.Background(), g, resources.SourceAuth{})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("err = %v, want an error without the password", err)
	}
}

func TestPickRef(t *testing.T) {
	a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	refs := map[plumbing.ReferenceName]*plumbing.Reference{}
	for _, r := range []*plumbing.Reference{
		plumbing.NewSymbolicReference(plumbing.HEAD, "refs/heads/trunk"),
		plumbing.NewHashReference("refs/heads/trunk", plumbing.NewHash(a)),
		plumbing.NewHashReference("refs/heads/dev", plumbing.NewHash(b)),
		plumbing.NewHashReference("refs/tags/light", plumbing.NewHash(b)),
		plumbing.NewHashReference("refs/tags/v1", plumbing.NewHash(c)),
		plumbing.NewHashReference("refs/tags/v1^{}", plumbing.NewHash(a)),
	} {
		refs[r.Name()] = r
	}
	tests := []struct {
		name string
		git  quadlet.GitSource
		want string
	}{
		{"default branch follows HEAD", quadlet.GitSource{}, a},
		{"branch", quadlet.GitSource{Branch: "dev"}, b},
		{"lightweight tag", quadlet.GitSource{Tag: "light"}, b},
		{"annotated tag is peeled", quadlet.GitSource{Tag: "v1"}, a},
		{"short commit", quadlet.GitSource{Commit: "BBBBBBB"}, b},
		{"missing branch", quadlet.GitSource{Branch: "nope"}, ""},
		{"short commit of no ref", quadlet.GitSource{Commit: "ddddddd"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickRef(refs, tc.git)
			if tc.want == "" {
				if !errors.Is(err, ErrRefNotFound) {
					t.Fatalf("pickRef = %q, %v; want ErrRefNotFound", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("pickRef = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
