package kat

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// outsideRefs are references to documents a clone of the repository does
// not have: the design notes and the specification of the workspace the
// project was written in, and section signs citing that specification. They
// are spelt in pieces so that this file does not hold them itself.
var outsideRefs = []string{
	"DESIGN" + ".md",
	".." + "/shared",
	"/work" + "/",
	"kat-" + "rfc",
	"\u00a7",
}

// markdownLinkRE matches the target of an inline Markdown link or image.
var markdownLinkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocsStayInRepository: README.md, every file under docs/ and every
// other Markdown file of the repository link only to what a clone holds:
// every relative link names a file or directory inside the repository that
// exists, and every link to a heading (#anchor) names one that exists.
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
// must exist inside the repository at root, and an anchor into a Markdown
// file must name one of its headings. It returns what is wrong, or "".
func checkLink(root, file, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	target, anchor, hasAnchor := strings.Cut(target, "#")
	if target == "" {
		return checkAnchor(file, anchor)
	}
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
	if hasAnchor && strings.HasSuffix(p, ".md") {
		return checkAnchor(p, anchor)
	}
	return ""
}

// checkAnchor checks that the Markdown file md has a heading whose anchor
// is anchor. It returns what is wrong, or "".
func checkAnchor(md, anchor string) string {
	b, err := os.ReadFile(md)
	if err != nil {
		return err.Error()
	}
	if slices.Contains(headingAnchors(string(b)), anchor) {
		return ""
	}
	return fmt.Sprintf("names no heading of %s: fix the anchor (#%s)", filepath.Base(md), anchor)
}

// headings returns the text of the Markdown headings of doc, outside code
// blocks.
func headings(doc string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text != "" && text[0] == ' ' {
			out = append(out, strings.TrimSpace(text))
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of doc:
// lowercase, without punctuation, spaces as '-', a repeated one suffixed
// -1, -2, ...
func headingAnchors(doc string) []string {
	var out []string
	seen := map[string]int{}
	for _, h := range headings(doc) {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

// repoFiles returns the files of the repository, relative to its root: what
// git tracks and what it would (untracked files it does not ignore), or,
// outside a Git checkout, every file but those in hidden directories and
// bin.
func repoFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if fi, err := os.Lstat(f); f != "" && err == nil && fi.Mode().IsRegular() {
				files = append(files, filepath.FromSlash(f))
			}
		}
		return files
	}
	var files []string
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || path == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readText returns the content of a repository file, or false for a
// binary one (it holds a NUL byte).
func readText(t *testing.T, file string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), !bytes.Contains(b, []byte{0})
}

// TestNoReferenceOutsideRepository: no file of the repository (code,
// comments, tests, docs, scripts) refers to a document that a clone does
// not hold. The architecture and the decisions a comment relies on are in
// docs/architecture.md; the Quadlet fields in docs/quadlet-reference.md.
func TestNoReferenceOutsideRepository(t *testing.T) {
	files := repoFiles(t)
	if len(files) == 0 {
		t.Fatal("found no file of the repository")
	}
	for _, file := range files {
		text, ok := readText(t, file)
		if !ok {
			continue
		}
		for i, line := range strings.Split(text, "\n") {
			for _, bad := range outsideRefs {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d: refers to %q, which a clone of the repository does not have: cite docs/architecture.md \"Section\" (or docs/quadlet-reference.md) instead", file, i+1, bad)
				}
			}
		}
	}
}

// architectureCitationRE matches a citation of a section of
// docs/architecture.md: the path, a space and the section's heading in
// double quotes, on one line.
var architectureCitationRE = regexp.MustCompile(`docs/architecture\.md "([^"]+)"`)

// TestArchitectureCitations: every citation of a section of
// docs/architecture.md in the repository (docs/architecture.md "Builds")
// names a heading the page has, so a comment never points at a section that
// was renamed or removed.
func TestArchitectureCitations(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	have := headings(string(b))
	found := 0
	for _, file := range repoFiles(t) {
		text, ok := readText(t, file)
		if !ok {
			continue
		}
		for i, line := range strings.Split(text, "\n") {
			for _, m := range architectureCitationRE.FindAllStringSubmatch(line, -1) {
				found++
				if m[1] != "Section" && !slices.Contains(have, m[1]) {
					t.Errorf("%s:%d: cites docs/architecture.md %q, which has no such section: its sections are %q", file, i+1, m[1], have)
				}
			}
		}
	}
	if found == 0 {
		t.Error("found no citation of docs/architecture.md: is the pattern still the one the code uses?")
	}
}
