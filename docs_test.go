package kat

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// outsideRepo are references to the workspace the project was written in,
// which a clone of the repository does not have.
var outsideRepo = []string{"../shared", "seeds/"}

// markdownLinkRE matches the target of an inline Markdown link or image.
var markdownLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocsStayInRepository: README.md, every file under docs/ and every
// other Markdown file of the repository point only at what a clone holds:
// no path into the workspace around the repository, and every relative link
// names a file or directory inside the repository that exists.
func TestDocsStayInRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if path == "README.md" || strings.HasPrefix(path, "docs"+string(filepath.Separator)) || strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("found no README.md")
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inFence := false
		for i, line := range strings.Split(string(data), "\n") {
			n := i + 1
			for _, bad := range outsideRepo {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d: refers to %q, which a clone of the repository does not have: point at a file in the repository (the Quadlet fields are in docs/quadlet-reference.md)", file, n, bad)
				}
			}
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = !inFence
			}
			if inFence {
				continue
			}
			for _, m := range markdownLinkRE.FindAllStringSubmatch(line, -1) {
				if msg := checkLink(root, file, m[1]); msg != "" {
					t.Errorf("%s:%d: link %s %s", file, n, m[1], msg)
				}
			}
		}
	}
}

// checkLink checks the target of a link found in file: a relative target
// must exist inside the repository at root. It returns what is wrong, or "".
func checkLink(root, file, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "#") {
		return ""
	}
	target, _, _ = strings.Cut(target, "#")
	if filepath.IsAbs(target) {
		return "is absolute: use a path relative to " + file
	}
	p, err := filepath.Abs(filepath.Join(filepath.Dir(file), filepath.FromSlash(target)))
	if err != nil {
		return err.Error()
	}
	if rel, err := filepath.Rel(root, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "points outside the repository: link to a file in it"
	}
	if _, err := os.Stat(p); err != nil {
		return "names nothing in the repository: fix the path or remove the link"
	}
	return ""
}
