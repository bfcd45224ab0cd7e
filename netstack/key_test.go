package netstack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadOrCreateKey: the first call creates a 0600 key file, later calls
// return the same key; a key others may read, or a file that holds no key,
// is refused.
func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "data", KeyFileName)
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k1 != k2 {
		t.Error("a second load made a new key")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable key: %v, want refused", err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("a file without a key: %v, want an error naming it", err)
	}
	if b, _ := os.ReadFile(bad); string(b) != "hello\n" {
		t.Error("a refused key file was overwritten")
	}
}
