package gitsync

import "testing"

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
