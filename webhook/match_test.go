package webhook

import "testing"

func TestRepoKey(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"https://github.com/example-ops/config.git", "github.com/example-ops/config"},
		{"https://github.com/Example-Ops/Config", "github.com/example-ops/config"},
		{"git@github.com:example-ops/config.git", "github.com/example-ops/config"},
		{"ssh://git@github.com:22/example-ops/config.git", "github.com/example-ops/config"},
		{"git://github.com/example-ops/config.git", "github.com/example-ops/config"},
		{"ssh://git@git.example.com:2222/ops/config.git", "git.example.com/ops/config"},
		{"https://user:token@git.example.com/ops/config.git/", "git.example.com/ops/config"},
		{"file:///srv/config.git", "file:///srv/config"},
		{"file:///srv/config/", "file:///srv/config"},
		{"", ""},
		{"not a url", ""},
		{"https://host-only.example", ""},
		{"/srv/config.git", ""},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := RepoKey(tc.in); got != tc.want {
				t.Fatalf("RepoKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPushMatches(t *testing.T) {
	t.Parallel()
	push := func(name string) Push {
		p, err := ParsePayload(name[:len(name)-len("-push.json")], fixture(t, name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, fixture, url, branch string
		want                       bool
	}{
		{"github https", "github-push.json", "https://github.com/example-ops/config", "main", true},
		{"github ssh source", "github-push.json", "ssh://git@github.com/example-ops/config.git", "refs/heads/main", true},
		{"github other branch", "github-push.json", "https://github.com/example-ops/config.git", "prod", false},
		{"github other repo", "github-push.json", "https://github.com/example-ops/other.git", "main", false},
		{"gitlab scp source", "gitlab-push.json", "git@gitlab.example.com:ops/config.git", "main", true},
		{"gitea https source", "gitea-push.json", "https://git.example.com/ops/config.git", "main", true},
		{"generic", "generic-push.json", "https://git.example.com/ops/config", "main", true},
		{"bad source url", "generic-push.json", "", "main", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := push(tc.fixture).Matches(tc.url, tc.branch); got != tc.want {
				t.Fatalf("Matches(%q, %q) = %v, want %v", tc.url, tc.branch, got, tc.want)
			}
		})
	}
}
