package gitx

import (
	"errors"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx/gittest"
	"kat.dws.rip/kat/quadlet"
)

// TestResolveAppRef resolves what workload.kat's spec.source.git follows
// (TestResolve tests the rest).
func TestResolveAppRef(t *testing.T) {
	t.Parallel()
	h := newHistory(t)
	srv := gittest.Serve(t, h.Repo, gittest.ServerOptions{})
	tests := []struct {
		name    string
		git     quadlet.GitSource
		want    string
		wantErr string
	}{
		{name: "branch", git: quadlet.GitSource{Branch: "main"}, want: h.second},
		{name: "default branch", git: quadlet.GitSource{}, want: h.second},
		{name: "annotated tag peeled", git: quadlet.GitSource{Tag: "v1"}, want: h.first},
		{name: "full commit as is", git: quadlet.GitSource{Commit: strings.ToUpper(h.bare)}, want: h.bare},
		{name: "short commit of a ref", git: quadlet.GitSource{Commit: h.second[:8]}, want: h.second},
		{name: "missing branch", git: quadlet.GitSource{Branch: "nope"}, wantErr: `branch "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.git
			g.Repository = srv.RepoURL
			got, err := ResolveAppRef(t.Context(), g, api.GitAuth{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrRefNotFound) {
					t.Fatalf("err = %v, want ErrRefNotFound containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveAppRef = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestAppRefString(t *testing.T) {
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
		if got := AppRef(tc.git).String(); got != tc.want {
			t.Errorf("AppRef(%+v).String() = %q, want %q", tc.git, got, tc.want)
		}
	}
}
