package webhook

import (
	"bytes"
	"fmt"
	"os"
)

// SecretFile returns a Secret func that reads path on every call, so a
// rotated file is picked up without a restart. Surrounding whitespace (the
// trailing newline of `echo secret > file`) is trimmed. The error names the
// path, never the content.
func SecretFile(path string) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read webhook secret file: %w", err)
		}
		return bytes.TrimSpace(b), nil
	}
}

// StaticSecret returns a Secret func that always returns secret.
func StaticSecret(secret []byte) func() ([]byte, error) {
	s := bytes.Clone(secret)
	return func() ([]byte, error) { return s, nil }
}
