package leader

import (
	"fmt"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/webhook"
)

func TestPlanAppSources(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	const iv = 30 * time.Second
	repo := "https://git.example.com/app.git"
	main := quadlet.GitSource{Repository: repo, Branch: "main"}
	w := func(k string, g quadlet.GitSource) appWorkload { return appWorkload{Key: k, Git: g} }
	rec := func(ref string) api.AppSource {
		return api.AppSource{Repository: repo, Ref: ref, Commit: "c"}
	}
	tests := []struct {
		name      string
		ws        []appWorkload
		recs      map[string]api.AppSource
		lastCheck map[string]time.Time
		forced    map[string]bool
		want      string
	}{
		{name: "never resolved", ws: []appWorkload{w("a/x", main)}, want: "due [a/x] delete []"},
		{name: "checked recently", ws: []appWorkload{w("a/x", main)}, recs: map[string]api.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now.Add(-time.Second)}, want: "due [] delete []"},
		{name: "interval passed", ws: []appWorkload{w("a/x", main)}, recs: map[string]api.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now.Add(-iv)}, want: "due [a/x] delete []"},
		{name: "webhook forces", ws: []appWorkload{w("a/x", main)}, recs: map[string]api.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now}, forced: map[string]bool{"a/x": true}, want: "due [a/x] delete []"},
		{name: "a new leader checks once", ws: []appWorkload{w("a/x", main)}, recs: map[string]api.AppSource{"a/x": rec("branch main")},
			want: "due [a/x] delete []"},
		{name: "ref changed", ws: []appWorkload{w("a/x", main)}, recs: map[string]api.AppSource{"a/x": rec("tag v1")},
			lastCheck: map[string]time.Time{"a/x": now}, want: "due [a/x] delete []"},
		{name: "no longer built from Git", recs: map[string]api.AppSource{"a/x": rec("branch main")}, want: "due [] delete [a/x]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planAppSources(tc.ws, tc.recs, tc.lastCheck, tc.forced, now, iv)
			if got := fmt.Sprintf("due %v delete %v", p.Due, p.Delete); got != tc.want {
				t.Fatalf("plan = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPushMatches(t *testing.T) {
	t.Parallel()
	repo := "https://git.example.com/team/app.git"
	push := func(ref string) webhook.Push {
		return webhook.Push{RepoURLs: []string{"git@git.example.com:team/app.git"}, Ref: ref}
	}
	tests := []struct {
		name string
		git  quadlet.GitSource
		push webhook.Push
		want bool
	}{
		{"branch pushed", quadlet.GitSource{Repository: repo, Branch: "main"}, push("refs/heads/main"), true},
		{"other branch", quadlet.GitSource{Repository: repo, Branch: "main"}, push("refs/heads/dev"), false},
		{"tag pushed", quadlet.GitSource{Repository: repo, Tag: "v1"}, push("refs/tags/v1"), true},
		{"pinned commit never moves", quadlet.GitSource{Repository: repo, Commit: "abcd"}, push("refs/heads/main"), false},
		{"default branch: any branch", quadlet.GitSource{Repository: repo}, push("refs/heads/whatever"), true},
		{"other repository", quadlet.GitSource{Repository: "https://git.example.com/team/other.git", Branch: "main"}, push("refs/heads/main"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pushMatches(tc.push, tc.git); got != tc.want {
				t.Fatalf("pushMatches = %v, want %v", got, tc.want)
			}
		})
	}
}
