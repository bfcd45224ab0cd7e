package gitsync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/quadlet"
)

// TestResolveRef resolves what workload.kat's spec.source.git follows
// (gitx.Resolve tests the rest).
func TestResolveRef(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.git
			g.Repository = url
			got, err := ResolveRef(ctx, g, api.GitAuth{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, gitx.ErrRefNotFound) {
					t.Fatalf("err = %v, want gitx.ErrRefNotFound containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveRef = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestRefString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		git  quadlet.GitSource
		want string
	}{
		{quadlet.GitSource{}, "default branch"},
		{quadlet.GitSource{Branch: "main"}, "branch main"},
		{quadlet.GitSource{Tag: "v1"}, "tag v1"},
		{quadlet.GitSource{Commit: "ABC1234"}, "commit abc1234"},
	} {
		if got := RefString(tc.git); got != tc.want {
			t.Errorf("RefString(%+v) = %q, want %q", tc.git, got, tc.want)
		}
	}
}
