package kat

import (
	"fmt"
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

// layers is the architecture table in docs/architecture.md, top to bottom:
// each top-level folder is one layer, and a package may import only packages
// of its own layer or of layers below it. An entry names a package path below
// the module and covers its subpackages, unless a longer entry names them
// (reconcile/leader and reconcile/agent sit above reconcile). Nothing imports
// cmd; nothing outside scripts imports scripts (scripts/harness is shared by
// the end-to-end tests and task cluster:up).
var layers = []string{
	"cmd", "node", "detach", "apiserver", "reconcile/leader", "reconcile/agent", "reconcile",
	"gitsync", "netstack", "netstack/ipam", "store", "webhook", "build", "build/usernsrun", "ingress", "runtime", "gitx", "apiclient", "pki", "api", "quadlet", "internal",
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
				t.Errorf("%s is not a package of docs/architecture.md's table; add it there and to layers", dir)
			case to == "":
				t.Errorf("%s imports %s, which is not in docs/architecture.md's table", dir, imp)
			case layerOf(to) < layerOf(from):
				t.Errorf("%s imports %s: %s sits above %s in docs/architecture.md, imports must point downwards", dir, imp, to, from)
			}
		}
	}
}

// TestAPIImportsTheStandardLibraryOnly: api is the model every layer stands
// on, so it links nothing but the standard library.
func TestAPIImportsTheStandardLibraryOnly(t *testing.T) {
	pkg, err := build.ImportDir("api", 0)
	if err != nil {
		t.Fatalf("read package api: %v", err)
	}
	for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports) {
		if !isStandardImportPath(imp) {
			t.Errorf("api imports %s: api may import the standard library only", imp)
		}
	}
}

// isStandardImportPath reports whether path is a package of the standard
// library: as the go command decides it, by a first element without a dot
// (every other path starts with a domain, as kat.dws.rip/kat does). Asking
// go/build where the package lives does not work in a test built with
// -trimpath, as task check builds it: it does not know GOROOT then.
func isStandardImportPath(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestIsStandardImportPath(t *testing.T) {
	for path, want := range map[string]bool{
		"fmt": true, "net/netip": true, "encoding/json": true,
		module + "/quadlet": false, "github.com/go-chi/chi/v5": false, "golang.org/x/crypto/bcrypt": false, "go.etcd.io/etcd/api/v3": false,
	} {
		if got := isStandardImportPath(path); got != want {
			t.Errorf("isStandardImportPath(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestNoAliasOfAPI: a record of api has one name, api.X: no package
// renames an api type or constant under an alias of its own.
func TestNoAliasOfAPI(t *testing.T) {
	for _, dir := range goPackageDirs(t) {
		if filepath.ToSlash(dir) == "api" {
			continue
		}
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", name, err)
			}
			for _, a := range apiAliases(f) {
				t.Errorf("%s: %s: use api.%s itself instead of an alias of it", fset.Position(a.pos), a.name, a.target)
			}
		}
	}
}

type apiAlias struct {
	pos          token.Pos
	name, target string
}

// apiAliases returns the type aliases (type X = api.Y) and constants
// (const X = api.Y) of f that rename a name of package api.
func apiAliases(f *ast.File) []apiAlias {
	local := ""
	for _, imp := range f.Imports {
		if strings.Trim(imp.Path.Value, `"`) == module+"/api" {
			local = "api"
			if imp.Name != nil {
				local = imp.Name.Name
			}
		}
	}
	if local == "" {
		return nil
	}
	target := func(e ast.Expr) (string, bool) {
		if ix, ok := e.(*ast.IndexExpr); ok {
			e = ix.X
		}
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", false
		}
		x, ok := sel.X.(*ast.Ident)
		return sel.Sel.Name, ok && x.Name == local
	}
	var out []apiAlias
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			switch spec := spec.(type) {
			case *ast.TypeSpec:
				if name, ok := target(spec.Type); ok && spec.Assign.IsValid() {
					out = append(out, apiAlias{spec.Pos(), spec.Name.Name, name})
				}
			case *ast.ValueSpec:
				if g.Tok != token.CONST {
					continue
				}
				for i, v := range spec.Values {
					if name, ok := target(v); ok && i < len(spec.Names) {
						out = append(out, apiAlias{spec.Names[i].Pos(), spec.Names[i].Name, name})
					}
				}
			}
		}
	}
	return out
}

func TestAPIAliasesFound(t *testing.T) {
	src := `package p

import (
	model "kat.dws.rip/kat/api"
	"time"
)

type (
	Owner = model.Owner
	Mine  struct{ model.Owner }
	Span  = time.Duration
)

const (
	Ready   = model.PhaseReady
	Second  = time.Second
	Literal = "Ready"
)
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range apiAliases(f) {
		got = append(got, a.name+"="+a.target)
	}
	if want := []string{"Owner=Owner", "Ready=PhaseReady"}; !slices.Equal(got, want) {
		t.Errorf("aliases found: %v, want %v", got, want)
	}
}

// TestRuntimeImportsNoQuadlet: runtime is the container runtime only; it
// knows containers, not workloads. Mapping a workload's Quadlet to a
// container is the agent's (reconcile/agent/containerspec), so neither
// runtime nor its tests import quadlet.
func TestRuntimeImportsNoQuadlet(t *testing.T) {
	for _, dir := range goPackageDirs(t) {
		rel := filepath.ToSlash(dir)
		if rel != "runtime" && !strings.HasPrefix(rel, "runtime/") {
			continue
		}
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read package %s: %v", dir, err)
		}
		for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports) {
			if imp == module+"/quadlet" || strings.HasPrefix(imp, module+"/quadlet/") {
				t.Errorf("%s imports %s: the workload-to-container mapping belongs to reconcile/agent/containerspec", dir, imp)
			}
		}
	}
}

// TestArchitectureTableIsLayers: the table of docs/architecture.md lists
// the packages in the order of layers, so the doc a contributor reads is
// the rule the tests enforce. A row names its package first, in
// backquotes; rows of a layer's subpackages (store/resources under store)
// count as their layer's, and scripts and examples-repo, which hold no
// layer of the product, are left out.
func TestArchitectureTableIsLayers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := architectureTable(string(b))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	if !slices.Equal(got, layers) {
		t.Errorf("docs/architecture.md's table lists the layers\n%v\nlayout_test.go's layers are\n%v", got, layers)
	}
}

// architectureTable returns the layers the package table of an
// architecture doc lists, in order: the table whose header is
// "| package | owns |".
func architectureTable(doc string) ([]string, error) {
	rows, err := architectureRows(doc)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range rows {
		if name == "scripts" || name == "examples-repo" {
			continue
		}
		entry := layerEntry(name)
		if entry == "" {
			return nil, fmt.Errorf("row %s: %s is in no layer of layout_test.go", name, name)
		}
		if len(out) == 0 || out[len(out)-1] != entry {
			out = append(out, entry)
		}
	}
	return out, nil
}

// architectureRows returns the package each row of an architecture doc's
// package table names first, in backquotes, in order.
func architectureRows(doc string) ([]string, error) {
	var out []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if !in {
			in = strings.HasPrefix(strings.ReplaceAll(line, " ", ""), "|package|owns|")
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if len(out) > 0 {
				break
			}
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
		if strings.Trim(cell, " -") == "" {
			continue // the header's rule
		}
		_, rest, ok := strings.Cut(cell, "`")
		name, _, ok2 := strings.Cut(rest, "`")
		if !ok || !ok2 {
			return nil, fmt.Errorf("row %q names no package in backquotes", line)
		}
		out = append(out, strings.TrimSuffix(name, "/*"))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no table with the header | package | owns |")
	}
	return out, nil
}

// TestArchitectureTableNamesEveryPackage: every package of the module has
// a row of its own in docs/architecture.md's table, and every row names a
// package or folder that exists, so the map a contributor reads is the
// tree. Packages under scripts share its row.
func TestArchitectureTableNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := architectureRows(string(b))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	seen := map[string]bool{}
	for _, name := range rows {
		if fi, err := os.Stat(filepath.FromSlash(name)); err != nil || !fi.IsDir() {
			t.Errorf("docs/architecture.md's table has a row for %s, which is no folder of the repository: remove or rename the row", name)
		}
		if seen[name] {
			t.Errorf("docs/architecture.md's table has two rows for %s: keep one", name)
		}
		seen[name] = true
	}
	for _, dir := range goPackageDirs(t) {
		rel := filepath.ToSlash(dir)
		if rel == "." || isScripts(rel) {
			continue
		}
		if !slices.Contains(rows, rel) {
			t.Errorf("package %s has no row in docs/architecture.md's table: add one under its layer's, saying what it owns", rel)
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

// TestLinks: what a program or a layer links, all dependencies counted,
// leaves out what it must not carry. A banned entry is a package path, or a
// path ending in "/..." for it and everything below it.
func TestLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	tests := []struct {
		name   string
		pkgs   []string
		banned []string
	}{{
		// katcall (the client) stays small: a user's CLI carries none of
		// the server's dependencies.
		name: "katcall links no server", pkgs: []string{"./cmd/katcall"},
		banned: []string{"go.etcd.io/...", "google.golang.org/grpc/...", "github.com/go-git/...", module + "/apiserver/...", module + "/store/..."},
	}, {
		// The leader's loops decide from records: they import neither the
		// config-repo sources, the builder nor the overlay device (its
		// IPAM arithmetic is netstack/ipam), and link no WireGuard or
		// netlink. They do link go-git, through gitx: the leader resolves
		// app repositories' refs.
		name: "the leader links no node machinery", pkgs: []string{"./reconcile/leader/..."},
		banned: []string{module + "/gitsync/...", module + "/build/...", module + "/netstack", module + "/netstack/dnsserver/...",
			"golang.zx2c4.com/wireguard/...", "github.com/vishvananda/netlink/...", "github.com/mdlayher/netlink/..."},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command("go", append([]string{"list", "-deps"}, tc.pkgs...)...).Output()
			if err != nil {
				t.Fatalf("go list -deps %v: %v", tc.pkgs, err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, b := range tc.banned {
					if matchesPattern(b, dep) {
						t.Errorf("%v links %s (through go list -deps)", tc.pkgs, dep)
					}
				}
			}
		})
	}
}

// TestOnlyTestHelpersLinkTesting: package testing (and what imports it)
// stays out of every program and library of the module, so kat-agent and
// katcall never carry it. Only the helpers tests share link it: packages
// named for it (gittest, polltest, storetest, ...) and internal/testenv.
// A helper a program needs too goes in a package of its own without
// testing (poll.Wait beside polltest.Until).
func TestOnlyTestHelpersLinkTesting(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if !slices.Contains(strings.Fields(deps), "testing") || isTestHelper(pkg) {
			continue
		}
		var helpers []string
		for _, d := range strings.Fields(deps) {
			if isTestHelper(d) {
				helpers = append(helpers, d)
			}
		}
		t.Errorf("%s links package testing (test helpers among its dependencies: %v): only test helpers may", pkg, helpers)
	}
}

// isTestHelper reports whether package path p is one of the module's test
// helpers: named ...test, or internal/testenv.
func isTestHelper(p string) bool {
	rel, ok := strings.CutPrefix(p, module+"/")
	return ok && (strings.HasSuffix(rel, "test") || rel == "internal/testenv")
}

// matchesPattern reports whether package path p is pattern, or below it
// when pattern ends in "/...".
func matchesPattern(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func TestMatchesPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"kat.dws.rip/kat/netstack", "kat.dws.rip/kat/netstack", true},
		{"kat.dws.rip/kat/netstack", "kat.dws.rip/kat/netstack/ipam", false},
		{"kat.dws.rip/kat/store/...", "kat.dws.rip/kat/store", true},
		{"kat.dws.rip/kat/store/...", "kat.dws.rip/kat/store/resources", true},
		{"kat.dws.rip/kat/store/...", "kat.dws.rip/kat/storefront", false},
		{"testing/...", "testing/fstest", true},
		{"testing/...", "internal/testlog", false},
	} {
		if got := matchesPattern(tc.pattern, tc.path); got != tc.want {
			t.Errorf("matchesPattern(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}
