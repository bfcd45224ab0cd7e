package gitx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"user and password", "https://bob:s3cret@git.example.com/acme/config.git", "https://git.example.com/acme/config.git"},
		{"escaped password", "https://bob:t0ken%2Fx@git.example.com/app.git", "https://git.example.com/app.git"},
		{"token as the user", "https://ghp_T0KEN@github.com/acme/app.git", "https://github.com/acme/app.git"},
		{"token as the password", "http://x-access-token:ghp_T0KEN@127.0.0.1:8080/app.git", "http://127.0.0.1:8080/app.git"},
		{"ssh user kept", "ssh://git@git.example.com:2222/acme/app.git", "ssh://git@git.example.com:2222/acme/app.git"},
		{"ssh password dropped", "ssh://git:pw@git.example.com/acme/app.git", "ssh://git@git.example.com/acme/app.git"},
		{"scp-like unchanged", "git@github.com:acme/app.git", "git@github.com:acme/app.git"},
		{"no credentials", "https://github.com/acme/app.git", "https://github.com/acme/app.git"},
		{"file URL", "file:///srv/git/app.git", "file:///srv/git/app.git"},
		{"unparsable", "https://bob:s3 cret@git.example.com/app.git", "https://git.example.com/app.git"},
		{"empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RedactURL(tc.in); got != tc.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactor(t *testing.T) {
	tests := []struct {
		name, url, msg, want string
	}{
		{
			name: "the URL and its password",
			url:  "https://bob:s3cret@git.example.com/acme/config.git",
			msg:  `fetch "https://bob:s3cret@git.example.com/acme/config.git": auth failed for s3cret`,
			want: `fetch "https://git.example.com/acme/config.git": auth failed for ***`,
		},
		{
			name: "escaped password, alone and in a longer URL",
			url:  "https://bob:t0ken%2Fx@git.example.com/app.git",
			msg:  "Get https://bob:t0ken%2Fx@git.example.com/app.git/info/refs?service=git-upload-pack: t0ken/x t0ken%2Fx",
			want: "Get https://git.example.com/app.git/info/refs?service=git-upload-pack: *** ***",
		},
		{
			name: "a token user in any URL",
			url:  "https://ghp_T0KEN@github.com/acme/app.git",
			msg:  "redirected to https://ghp_T0KEN@github.com/Acme/App.git and ssh://git:pw@host/x, ssh://git@host/y",
			want: "redirected to https://github.com/Acme/App.git and ssh://git@host/x, ssh://git@host/y",
		},
		{
			name: "zero Redactor strips URLs only",
			msg:  "list https://u:p@h/r.git: p",
			want: "list https://h/r.git: p",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Redactor{}
			if tc.url != "" {
				r = NewRedactor(tc.url)
			}
			if got := r.String(tc.msg); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRedactorError hides the credentials and keeps the chain.
func TestRedactorError(t *testing.T) {
	raw := "https://bob:t0ken%2Fx@git.example.com/app.git"
	red := NewRedactor(raw)
	err := red.Error(fmt.Errorf("fetch %s: %w (password t0ken/x)", raw, context.Canceled))
	if strings.Contains(err.Error(), "t0ken") || !errors.Is(err, context.Canceled) {
		t.Errorf("redacted error %q (chain kept: %t)", err, errors.Is(err, context.Canceled))
	}
	plain := errors.New("no credentials here")
	if got := red.Error(plain); got.Error() != plain.Error() || !errors.Is(got, plain) {
		t.Errorf("an error without credentials became %q", got)
	}
	if red.Error(nil) != nil {
		t.Error("a nil error became one")
	}
}
