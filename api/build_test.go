package api

import "testing"

func TestImageName(t *testing.T) {
	commit := "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct {
		name, got, want string
	}{
		{"repository", ImageRepository("prod", "web"), "kat-local/prod_web"},
		{"image", ImageName("prod", "web", commit), "kat-local/prod_web:0123456789ab"},
		{"short commit", ShortCommit(commit), "0123456789ab"},
		{"shorter than 12 as is", ShortCommit("abc"), "abc"},
		{"empty", ShortCommit(""), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
