package kat

import (
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/quadlet"
)

// referenceFile is the field reference of every Quadlet kind. Its sections
// are headed "## Kind (file)"; in each, a table whose header is
// referenceColumns lists every field by its path, and every ```yaml block
// is a complete file of that kind.
const referenceFile = "docs/quadlet-reference.md"

// referenceColumns is the header of a field table.
var referenceColumns = []string{"Field", "Type", "Required", "Default", "Rules"}

// referenceKind is a kind the reference documents: the Go type the parser
// decodes it into, the file it conventionally lives in, and how to parse an
// example of it with the real parser.
type referenceKind struct {
	typ   reflect.Type
	file  string
	parse func(example []byte) error
}

// Examples of the kinds that live beside a Workload are parsed in a workload
// directory with the smallest workload.kat they are allowed with.
const (
	companionHeader   = "apiVersion: kat.dws.rip/v1alpha1\n"
	companionWorkload = companionHeader + `kind: Workload
metadata: {name: companion}
spec:
  type: %s
  source: %s
  replicas: 1
  restartPolicy: {condition: Never}
  container: {}
`
	companionImage = "{image: localhost/kat-base:latest}"
	companionGit   = "{git: {repository: https://git.example.com/app.git}}"
	companionJob   = companionHeader + "kind: JobDefinition\n"
	companionBuild = companionHeader + "kind: BuildDefinition\n"
)

var referenceKinds = map[string]referenceKind{
	quadlet.KindWorkload: {reflect.TypeFor[quadlet.Workload](), quadlet.WorkloadFile, func(b []byte) error {
		// A Job needs its job.kat and a Git source its build.kat: add the
		// smallest ones.
		var w struct {
			Spec struct {
				Type   string
				Source struct{ Git any }
			}
		}
		_ = yaml.Unmarshal(b, &w) // the parser reports what is wrong
		files := map[string][]byte{quadlet.WorkloadFile: b}
		if w.Spec.Type == quadlet.TypeJob {
			files["job.kat"] = []byte(companionJob)
		}
		if w.Spec.Source.Git != nil {
			files["build.kat"] = []byte(companionBuild)
		}
		_, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
		return err
	}},
	quadlet.KindVirtualLoadBalancer: {reflect.TypeFor[quadlet.VirtualLoadBalancer](), "VirtualLoadBalancer.kat", func(b []byte) error {
		return parseBeside("VirtualLoadBalancer.kat", b, fmt.Sprintf(companionWorkload, quadlet.TypeService, companionImage))
	}},
	quadlet.KindJobDefinition: {reflect.TypeFor[quadlet.JobDefinition](), "job.kat", func(b []byte) error {
		return parseBeside("job.kat", b, fmt.Sprintf(companionWorkload, quadlet.TypeJob, companionImage))
	}},
	quadlet.KindBuildDefinition: {reflect.TypeFor[quadlet.BuildDefinition](), "build.kat", func(b []byte) error {
		return parseBeside("build.kat", b, fmt.Sprintf(companionWorkload, quadlet.TypeService, companionGit))
	}},
	quadlet.KindNamespace: {reflect.TypeFor[quadlet.Namespace](), quadlet.NamespaceFile, func(b []byte) error {
		_, err := quadlet.ParseNamespace(quadlet.NamespaceFile, b)
		return err
	}},
	quadlet.KindSecret: {reflect.TypeFor[quadlet.SecretDocument](), "NAME.sops.yaml", func(b []byte) error {
		_, err := quadlet.ParseSecretFile("NAME.sops.yaml", b)
		return err
	}},
	quadlet.KindClusterConfiguration: {reflect.TypeFor[quadlet.ClusterConfiguration](), "cluster.kat", func(b []byte) error {
		_, err := quadlet.ParseClusterConfiguration("cluster.kat", b)
		return err
	}},
}

// parseBeside parses file holding example in a workload directory whose
// workload.kat is workload.
func parseBeside(file string, example []byte, workload string) error {
	_, err := quadlet.ParseWorkload(map[string][]byte{file: example, quadlet.WorkloadFile: []byte(workload)}, quadlet.ParseOptions{})
	return err
}

// TestQuadletReferenceCoversParser checks docs/quadlet-reference.md against
// the parser both ways: every kind the quadlet package declares has a
// section, every field path the parser decodes is documented with its type,
// and every documented path is one the parser decodes.
func TestQuadletReferenceCoversParser(t *testing.T) {
	ref := readReference(t)
	for _, kind := range declaredKinds(t) {
		if _, ok := referenceKinds[kind]; !ok {
			t.Errorf("package quadlet declares kind %s: add it to referenceKinds in quadlet_reference_test.go and a section \"## %s (FILE)\" to %s", kind, kind, referenceFile)
		}
	}
	for _, kind := range slices.Sorted(maps.Keys(referenceKinds)) {
		t.Run(kind, func(t *testing.T) {
			rk := referenceKinds[kind]
			sec, ok := ref.sections[kind]
			if !ok {
				t.Fatalf("%s has no section for kind %s: add \"## %s (%s)\" with a field table and an example", referenceFile, kind, kind, rk.file)
			}
			if sec.file != rk.file {
				t.Errorf("%s:%d: the section of %s names the file %s; the kind lives in %s", referenceFile, sec.line, kind, sec.file, rk.file)
			}
			var fields []fieldType
			walkFields(t, rk.typ, "", &fields)
			accepted := map[string]bool{}
			for _, f := range fields {
				accepted[f.path] = true
				row, ok := sec.rows[f.path]
				switch {
				case !ok:
					t.Errorf("%s: the %s section does not document %s, which the parser accepts: add the row\n\t| `%s` | %s | REQUIRED? | DEFAULT | RULES |",
						referenceFile, kind, f.path, f.path, f.typ)
				case row.typ != f.typ:
					t.Errorf("%s:%d: %s: the Type column says %q, the parser reads %s: write %q",
						referenceFile, row.line, f.path, row.typ, f.typ, f.typ)
				}
			}
			for _, path := range slices.Sorted(maps.Keys(sec.rows)) {
				if !accepted[path] {
					t.Errorf("%s:%d: the %s section documents %s, which the parser does not accept (no such yaml field in quadlet.%s): remove the row or correct its path",
						referenceFile, sec.rows[path].line, kind, path, rk.typ.Name())
				}
			}
		})
	}
	for _, e := range ref.errs {
		t.Error(e)
	}
}

// TestQuadletReferenceExamplesParse parses every YAML example of
// docs/quadlet-reference.md with the real parser, as a file of the kind its
// section documents, so that no example an operator copies is invalid.
func TestQuadletReferenceExamplesParse(t *testing.T) {
	ref := readReference(t)
	for _, kind := range slices.Sorted(maps.Keys(referenceKinds)) {
		t.Run(kind, func(t *testing.T) {
			sec, ok := ref.sections[kind]
			if !ok {
				t.Fatalf("%s has no section for kind %s", referenceFile, kind)
			}
			if len(sec.examples) == 0 {
				t.Errorf("%s:%d: the %s section has no example: add a complete, minimal file in a ```yaml block", referenceFile, sec.line, kind)
			}
			for _, ex := range sec.examples {
				var head struct{ Kind string }
				if err := yaml.Unmarshal(ex.text, &head); err == nil && head.Kind != kind {
					t.Errorf("%s:%d: an example of kind %q sits in the %s section: move it, fix its kind, or make it a ```text block if it is not a whole file",
						referenceFile, ex.line, head.Kind, kind)
					continue
				}
				if err := referenceKinds[kind].parse(ex.text); err != nil {
					t.Errorf("%s:%d: this %s example does not parse; fix it (or the parser, if the example is right):\n%s",
						referenceFile, ex.line, kind, exampleErrors(err, referenceKinds[kind].file, ex.line))
				}
			}
		})
	}
}

// exampleErrors renders a parse error with the lines of the example, parsed
// as file, turned into lines of the reference; problems of the test's
// companion files keep their own names.
func exampleErrors(err error, file string, fenceLine int) string {
	var list quadlet.ErrorList
	if !errors.As(err, &list) {
		return "\t" + err.Error()
	}
	var b strings.Builder
	for _, e := range list {
		if e.File == file && e.Line > 0 {
			fmt.Fprintf(&b, "\t%s:%d: %s: %s\n", referenceFile, fenceLine+e.Line, e.Field, e.Message)
			continue
		}
		fmt.Fprintf(&b, "\t%s\n", e)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// fieldType is one field path the parser decodes and the name the reference
// gives its type.
type fieldType struct{ path, typ string }

// referenceTypes names the types the decoder reads in their own way.
var referenceTypes = map[reflect.Type]string{
	reflect.TypeFor[quadlet.IntOrPercent](): "integer or percentage",
}

// walkFields appends every field the decoder accepts in struct type t, as
// the decoder names them: yaml tag names joined by dots, "[]" for the items
// of a list and "[key]" for the entries of a map of mappings.
func walkFields(t *testing.T, typ reflect.Type, prefix string, out *[]fieldType) {
	t.Helper()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		walkValue(t, f.Type, path, out)
	}
}

func walkValue(t *testing.T, typ reflect.Type, path string, out *[]fieldType) {
	t.Helper()
	typ = deref(typ)
	if word, ok := referenceTypes[typ]; ok {
		*out = append(*out, fieldType{path, word})
		return
	}
	if word, ok := scalarType(typ); ok {
		*out = append(*out, fieldType{path, word})
		return
	}
	switch typ.Kind() {
	case reflect.Struct:
		switch {
		case typ.NumField() == 0:
			*out = append(*out, fieldType{path, "empty mapping"})
		case !hasYAMLFields(typ):
			t.Fatalf("%s is decoded into %s, which has no yaml fields: name its type in referenceTypes", path, typ)
		default:
			*out = append(*out, fieldType{path, "mapping"})
			walkFields(t, typ, path, out)
		}
	case reflect.Slice:
		elem := deref(typ.Elem())
		if word, ok := scalarType(elem); ok {
			*out = append(*out, fieldType{path, "list of " + word + "s"})
			return
		}
		if elem.Kind() != reflect.Struct || !hasYAMLFields(elem) {
			t.Fatalf("%s is a list of %s: teach walkValue to name it", path, elem)
		}
		*out = append(*out, fieldType{path, "list of mappings"})
		walkFields(t, elem, path+"[]", out)
	case reflect.Map:
		elem := deref(typ.Elem())
		if typ.Key().Kind() != reflect.String {
			t.Fatalf("%s is a map with %s keys: the decoder reads only string keys", path, typ.Key())
		}
		if word, ok := scalarType(elem); ok {
			*out = append(*out, fieldType{path, "map of " + word + "s"})
			return
		}
		if elem.Kind() != reflect.Struct || !hasYAMLFields(elem) {
			t.Fatalf("%s is a map of %s: teach walkValue to name it", path, elem)
		}
		*out = append(*out, fieldType{path, "map of mappings"})
		walkFields(t, elem, path+"[key]", out)
	default:
		t.Fatalf("%s is a %s, which the decoder does not read", path, typ)
	}
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// scalarType names the scalar types the decoder reads.
func scalarType(t reflect.Type) (string, bool) {
	switch t.Kind() {
	case reflect.String:
		return "string", true
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer", true
	case reflect.Bool:
		return "boolean", true
	}
	return "", false
}

func hasYAMLFields(t reflect.Type) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && name != "" && name != "-" {
			return true
		}
	}
	return false
}

// declaredKinds returns the values of the Kind* string constants of package
// quadlet: every kind the parser knows.
func declaredKinds(t *testing.T) []string {
	t.Helper()
	pkg, err := build.ImportDir("quadlet", 0)
	if err != nil {
		t.Fatalf("read package quadlet: %v", err)
	}
	var kinds []string
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(pkg.Dir, name), nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok {
					continue
				}
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Kind") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatalf("quadlet.%s: %v", name.Name, err)
						}
						kinds = append(kinds, v)
					}
				}
			}
		}
	}
	if len(kinds) == 0 {
		t.Fatal("package quadlet declares no Kind* constants; update declaredKinds")
	}
	slices.Sort(kinds)
	return kinds
}

// reference is what the test reads from docs/quadlet-reference.md.
type reference struct {
	sections map[string]*referenceSection // by kind
	errs     []string                     // malformed tables and headings
}

type referenceSection struct {
	line     int    // of its heading
	file     string // the file its heading names
	rows     map[string]referenceRow
	examples []referenceExample
}

type referenceRow struct {
	line int
	typ  string
}

type referenceExample struct {
	line int // of the opening fence; the example's line n is line+n
	text []byte
}

var (
	kindHeadingRE = regexp.MustCompile(`^## (\S+) \((\S+)\)$`)
	codeCellRE    = regexp.MustCompile("^`([^`]+)`$")
)

// readReference reads the sections, field tables and YAML examples of the
// reference.
func readReference(t *testing.T) *reference {
	t.Helper()
	data, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatalf("read the Quadlet field reference: %v", err)
	}
	ref := &reference{sections: map[string]*referenceSection{}}
	errorf := func(line int, format string, args ...any) {
		ref.errs = append(ref.errs, fmt.Sprintf("%s:%d: %s", referenceFile, line, fmt.Sprintf(format, args...)))
	}
	lines := strings.Split(string(data), "\n")
	var (
		sec     *referenceSection
		secKind string
		inTable bool // inside a field table, past its header
		fence   string
		example *referenceExample
	)
	for i, line := range lines {
		n := i + 1
		if fence != "" {
			if strings.TrimSpace(line) == fence {
				fence = ""
				if example != nil {
					sec.examples = append(sec.examples, *example)
					example = nil
				}
				continue
			}
			if example != nil {
				example.text = append(example.text, line+"\n"...)
			}
			continue
		}
		if strings.HasPrefix(line, "```") {
			fence = "```"
			if info := strings.TrimSpace(strings.TrimPrefix(line, "```")); info == "yaml" || info == "yml" {
				if sec == nil {
					errorf(n, "a ```yaml block outside the section of a kind: move it into one, or make it ```text if it is not a whole file")
				} else {
					example = &referenceExample{line: n}
				}
			}
			continue
		}
		if strings.HasPrefix(line, "## ") {
			inTable = false
			sec, secKind = nil, ""
			m := kindHeadingRE.FindStringSubmatch(line)
			if m == nil {
				continue // a section that documents no kind
			}
			if _, ok := referenceKinds[m[1]]; !ok {
				errorf(n, "heading names the kind %q, which the parser does not know: use one of %s, or reword the heading", m[1], strings.Join(slices.Sorted(maps.Keys(referenceKinds)), ", "))
				continue
			}
			if prev, dup := ref.sections[m[1]]; dup {
				errorf(n, "a second section for kind %s (the first is at line %d): merge them", m[1], prev.line)
				continue
			}
			secKind = m[1]
			sec = &referenceSection{line: n, file: m[2], rows: map[string]referenceRow{}}
			ref.sections[secKind] = sec
			continue
		}
		if !strings.HasPrefix(line, "|") {
			inTable = false
			continue
		}
		cells := tableCells(line)
		switch {
		case slices.Equal(cells, referenceColumns):
			if sec == nil {
				errorf(n, "a field table outside the section of a kind: move it into one")
				continue
			}
			inTable = true
		case !inTable || isSeparatorRow(cells):
		case len(cells) != len(referenceColumns):
			errorf(n, "a row of %d cells in a field table of %d columns (%s); escape a '|' inside a cell as '\\|'", len(cells), len(referenceColumns), strings.Join(referenceColumns, ", "))
		default:
			m := codeCellRE.FindStringSubmatch(cells[0])
			if m == nil {
				errorf(n, "the Field cell %q must be the field's path alone, in backticks", cells[0])
				continue
			}
			if prev, dup := sec.rows[m[1]]; dup {
				errorf(n, "%s is documented twice in the %s section (first at line %d): keep one row", m[1], secKind, prev.line)
				continue
			}
			sec.rows[m[1]] = referenceRow{line: n, typ: cells[1]}
		}
	}
	if fence != "" {
		errorf(len(lines), "a code block is not closed")
	}
	return ref
}

// tableCells splits a Markdown table row into trimmed cells; "\|" is a pipe
// inside a cell.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

func isSeparatorRow(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, ":-") != "" || c == "" {
			return false
		}
	}
	return true
}
