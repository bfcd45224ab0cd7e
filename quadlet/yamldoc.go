package quadlet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// document is one parsed .kat file: its YAML tree and, once decoded into a
// typed value, the line of every field found and the fields that failed to
// decode.
type document struct {
	file string
	root *yaml.Node // top-level mapping
	// apiVersion and kind as written, empty when absent or not a scalar.
	apiVersion string
	kind       string

	lines  map[string]int  // field path -> line of its key or list item
	nulls  map[string]bool // fields present with a null value
	bad    map[string]bool // fields whose value could not be decoded
	visits int
	errs   ErrorList
}

// yamlLineRE matches the position prefix of yaml.v3 syntax errors.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseDocument parses data as exactly one YAML document whose top level is a
// mapping. On failure the returned document is nil and errs says why.
func parseDocument(file string, data []byte) (doc *document, errs ErrorList) {
	defer func() {
		// The YAML parser is not ours; never let a bug in it crash the
		// caller on hostile input.
		if r := recover(); r != nil {
			doc = nil
			errs = ErrorList{{File: file, Message: fmt.Sprintf("cannot parse YAML: %v", r)}}
		}
	}()
	fail := func(line int, format string, args ...any) (*document, ErrorList) {
		return nil, ErrorList{{File: file, Line: line, Message: fmt.Sprintf(format, args...)}}
	}
	// Empty documents, such as one after a trailing "---", are ignored;
	// exactly one other must remain.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var top *yaml.Node
	for {
		var root yaml.Node
		err := dec.Decode(&root)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line, msg := splitYAMLError(err)
			if lines := bytes.Split(data, []byte("\n")); line > 0 && line <= len(lines) && bytes.ContainsRune(lines[line-1], '\t') {
				msg += " (YAML does not allow tabs for indentation)"
			}
			return fail(line, "invalid YAML: %s", msg)
		}
		if len(root.Content) != 1 || isNull(root.Content[0]) {
			continue
		}
		if top != nil {
			return fail(root.Content[0].Line, "file holds more than one YAML document; put each kind in its own file")
		}
		top = root.Content[0]
	}
	if top == nil {
		return fail(0, "file is empty")
	}
	if top.Kind != yaml.MappingNode {
		return fail(top.Line, "must be a YAML mapping with apiVersion, kind and spec, got %s", describeNode(top))
	}
	return newDocument(file, top), nil
}

// newDocument wraps a top-level mapping, noting its apiVersion and kind.
func newDocument(file string, top *yaml.Node) *document {
	doc := &document{
		file:  file,
		root:  top,
		lines: map[string]int{},
		nulls: map[string]bool{},
		bad:   map[string]bool{},
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value != "apiVersion" && k.Value != "kind" {
			continue
		}
		doc.lines[k.Value] = k.Line
		switch {
		case isNull(v):
			doc.nulls[k.Value] = true
		case v.Kind == yaml.ScalarNode && k.Value == "apiVersion":
			doc.apiVersion = v.Value
		case v.Kind == yaml.ScalarNode:
			doc.kind = v.Value
		}
	}
	return doc
}

// yamlParserErrors are the yaml.v3 parser (not scanner) messages whose line
// yaml.v3 reports counting from 0 rather than 1.
var yamlParserErrors = []string{
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected node content",
	"did not find expected <document start>",
}

// splitYAMLError extracts the line from a yaml.v3 error message.
func splitYAMLError(err error) (int, string) {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		if slices.Contains(yamlParserErrors, m[2]) {
			n++
		}
		return n, m[2]
	}
	return 0, strings.TrimPrefix(msg, "yaml: ")
}

// describeNode names a node's type and value for error messages.
func describeNode(n *yaml.Node) string {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode {
		return describeType(n)
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:37] + "..."
	}
	switch n.ShortTag() {
	case "!!null":
		return "nothing"
	case "!!str":
		return "the string " + strconv.Quote(v)
	case "!!int", "!!float":
		return "the number " + v
	case "!!bool":
		return v
	}
	return strconv.Quote(v)
}
