package gitsync

import "testing"

func TestNormalizeURL(t *testing.T) {
	same := []struct {
		name string
		a, b string
	}{
		{"git suffix", "https://github.com/acme/config.git", "https://github.com/acme/config"},
		{"host case", "https://GitHub.com/acme/config", "https://github.com/acme/config"},
		{"trailing slash", "https://github.com/acme/config/", "https://github.com/acme/config"},
		{"ssh url", "ssh://git@github.com:22/acme/config.git", "https://github.com/acme/config"},
		{"scp like", "git@github.com:acme/config.git", "https://github.com/acme/config"},
		{"http port", "http://gitea.local:3000/acme/config.git", "https://gitea.local/acme/config"},
		{"user info", "https://user:pw@github.com/acme/config", "https://github.com/acme/config"},
		{"file", "file:///srv/config.git", "file:///srv/config"},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			if a, b := NormalizeURL(tc.a), NormalizeURL(tc.b); a != b {
				t.Errorf("NormalizeURL(%q) = %q, NormalizeURL(%q) = %q: want equal", tc.a, a, tc.b, b)
			}
		})
	}
	differ := []struct{ a, b string }{
		{"https://github.com/acme/config", "https://github.com/acme/other"},
		{"https://github.com/acme/config", "https://gitlab.com/acme/config"},
		{"https://github.com/acme/Config", "https://github.com/acme/config"},
	}
	for _, tc := range differ {
		if NormalizeURL(tc.a) == NormalizeURL(tc.b) {
			t.Errorf("NormalizeURL(%q) == NormalizeURL(%q): want different", tc.a, tc.b)
		}
	}
}

func TestRedact(t *testing.T) {
	raw := "https://bob:s3cret@git.example.com/acme/config.git"
	if got := RedactURL(raw); got != "https://git.example.com/acme/config.git" {
		t.Errorf("RedactURL = %q", got)
	}
	msg := redactMessage(`fetch "`+raw+`": auth failed for s3cret`, raw)
	if msg != `fetch "https://git.example.com/acme/config.git": auth failed for ***` {
		t.Errorf("redactMessage = %q", msg)
	}
}
