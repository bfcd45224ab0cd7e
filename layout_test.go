package kat

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

const module = "kat.dws.rip/kat"

// layers is DESIGN.md's package table, top to bottom: a package may import only
// packages of its own layer or of layers below it. An entry names a package
// path below the module and covers its subpackages, unless a longer entry
// names them (reconcile/leader sits above reconcile). Nothing imports cmd; nothing outside scripts imports scripts
// (scripts/harness is shared by the end-to-end tests and task cluster:up).
var layers = []string{
	"cmd", "node", "apiserver", "reconcile/leader", "reconcile/agent", "reconcile",
	"gitsync", "webhook", "build", "netstack", "runtime", "store", "gitx", "apiclient", "quadlet", "api", "pki", "internal",
}

// goPackageDirs returns every directory of the module holding Go files,
// relative to the module root, skipping testdata and hidden directories.
func goPackageDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "examples-repo") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			dir := filepath.Dir(path)
			if !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// layerEntry returns the entry of layers that covers a package path relative
// to the module: the longest entry equal to it or a parent of it, or "".
func layerEntry(rel string) string {
	best := ""
	for _, l := range layers {
		if (rel == l || strings.HasPrefix(rel, l+"/")) && len(l) > len(best) {
			best = l
		}
	}
	return best
}

func isScripts(rel string) bool { return rel == "scripts" || strings.HasPrefix(rel, "scripts/") }

func layerOf(entry string) int { return slices.Index(layers, entry) }

func TestImportsPointDownwards(t *testing.T) {
	for _, dir := range goPackageDirs(t) {
		if dir == "." {
			continue
		}
		pkg, err := build.ImportDir(dir, build.ImportComment)
		if err != nil {
			t.Fatalf("read package %s: %v", dir, err)
		}
		rel := filepath.ToSlash(dir)
		from := layerEntry(rel)
		imports := slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports)
		for _, imp := range imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			impRel := strings.TrimPrefix(strings.TrimPrefix(imp, module), "/")
			to := layerEntry(impRel)
			switch {
			case to == "cmd" || (isScripts(impRel) && !isScripts(rel)):
				t.Errorf("%s imports %s: nothing may import cmd, nor scripts from outside scripts", dir, imp)
			case from == "cmd" || isScripts(rel) || from == to:
			case from == "":
				t.Errorf("%s is not a package of DESIGN.md's table; add it there and to layers", dir)
			case to == "":
				t.Errorf("%s imports %s, which is not in DESIGN.md's table", dir, imp)
			case layerOf(to) < layerOf(from):
				t.Errorf("%s imports %s: %s sits above %s in DESIGN.md, imports must point downwards", dir, imp, to, from)
			}
		}
	}
}

func TestEveryPackageHasADocComment(t *testing.T) {
	for _, dir := range goPackageDirs(t) {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read package %s: %v", dir, err)
		}
		var docs []string
		for _, name := range pkg.GoFiles {
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Fatalf("parse %s: %v", filepath.Join(dir, name), err)
			}
			if f.Doc != nil {
				docs = append(docs, name)
				checkDocStart(t, dir, pkg.Name, f.Doc)
			}
		}
		switch len(docs) {
		case 0:
			t.Errorf("package %s in %s has no doc comment (add a doc.go)", pkg.Name, dir)
		case 1:
		default:
			t.Errorf("package %s in %s has doc comments in several files %v: keep one", pkg.Name, dir, docs)
		}
	}
}

func checkDocStart(t *testing.T, dir, name string, doc *ast.CommentGroup) {
	t.Helper()
	text := doc.Text()
	want := "Package " + name + " "
	if name == "main" {
		want = "Command "
	}
	if !strings.HasPrefix(text, want) {
		t.Errorf("doc comment of %s should start with %q, got %q", dir, want, firstLine(text))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestExamplesRepoParses checks that every Quadlet directory and namespace
// file of examples-repo is valid, so the README's start command never applies
// a broken example.
func TestExamplesRepoParses(t *testing.T) {
	root := "examples-repo"
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, quadlet.WorkloadFile)); err == nil {
				found++
				if _, err := quadlet.LoadDir(path, quadlet.ParseOptions{}); err != nil {
					t.Errorf("%s: %v", path, err)
				}
				return filepath.SkipDir
			}
			return nil
		}
		switch d.Name() {
		case quadlet.NamespaceFile:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := quadlet.ParseNamespace(path, b); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		case "cluster.kat":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := quadlet.ParseClusterConfiguration(path, b); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("examples-repo holds no Quadlet directory")
	}
}

// TestKatcallLinksNoServer: katcall (the client) links neither etcd, gRPC,
// go-git nor the API server: it stays small, and a user's CLI carries none of
// the server's dependencies.
func TestKatcallLinksNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", "./cmd/katcall").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/katcall: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"go.etcd.io/", "google.golang.org/grpc", "github.com/go-git/", module + "/apiserver", module + "/store"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("katcall links %s", dep)
			}
		}
	}
}
