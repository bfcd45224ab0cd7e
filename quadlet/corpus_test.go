package quadlet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInvalidCorpus parses every directory under testdata/invalid and checks
// that it is refused with a message containing the text of the sibling
// .want file.
func TestInvalidCorpus(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/invalid/*.want")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 40 {
		t.Fatalf("found %d invalid cases, want at least 40", len(dirs))
	}
	for _, wantFile := range dirs {
		dir := strings.TrimSuffix(wantFile, ".want")
		t.Run(filepath.Base(dir), func(t *testing.T) {
			want, err := os.ReadFile(wantFile)
			if err != nil {
				t.Fatal(err)
			}
			files, err := ReadDir(dir, DefaultLimits)
			if err != nil {
				// Layout problems, such as a non-.kat file, are
				// reported by ParseWorkload too; read them raw.
				files = readAll(t, dir)
			}
			_, err = ParseWorkload(files, ParseOptions{})
			if err == nil {
				t.Fatalf("ParseWorkload accepted %s", dir)
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error is %T, want ErrorList: %v", err, err)
			}
			if w := strings.TrimSpace(string(want)); !strings.Contains(err.Error(), w) {
				t.Errorf("error does not contain %q:\n%v", w, err)
			}
		})
	}
}

// TestValidCorpus parses every directory under testdata/valid.
func TestValidCorpus(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/valid/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no valid cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			if _, err := LoadDir(dir, ParseOptions{}); err != nil {
				t.Fatalf("LoadDir(%s): %v", dir, err)
			}
		})
	}
}

// readAll reads every regular file in dir.
func readAll(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = data
	}
	return files
}
