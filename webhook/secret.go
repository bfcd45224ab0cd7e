package webhook

import (
	"bytes"
	"errors"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/internal/filewatch"
)

// SecretFile returns a Secret func over the file at path: see
// [WatchSecretFile], whose watch it does not run (a change is still seen
// by the next request).
func SecretFile(path string) func() ([]byte, error) {
	return WatchSecretFile(path, zerolog.Nop()).Get
}

// WatchSecretFile returns the webhook secret held in the file at path,
// read now and again whenever the file changes: its Get, a Secret func,
// checks the file's identity and times on every call, so a request made
// after a rotation is verified against the new secret, and its Run reloads
// (and logs a bad change) as soon as the watch reports it. Surrounding
// whitespace (the trailing newline of `echo secret > file`) is trimmed. A
// file that becomes unreadable or empty (half-written) keeps the last good
// secret, logged once naming the path, never the content; until the file
// has held a secret, Get fails and every webhook is refused.
func WatchSecretFile(path string, log zerolog.Logger) *filewatch.Value[[]byte] {
	return filewatch.NewValue(filewatch.Config{Files: []string{path}, Logger: log}, parseSecret)
}

func parseSecret(data [][]byte) ([]byte, error) {
	s := bytes.TrimSpace(data[0])
	if len(s) == 0 {
		return nil, errors.New("the webhook secret file is empty")
	}
	return s, nil
}

// StaticSecret returns a Secret func that always returns secret.
func StaticSecret(secret []byte) func() ([]byte, error) {
	s := bytes.Clone(secret)
	return func() ([]byte, error) { return s, nil }
}
