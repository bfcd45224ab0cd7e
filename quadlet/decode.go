package quadlet

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodeVisits bounds the work the decoder does for one document, so that
// aliases that expand exponentially ("billion laughs") cannot stall a parse.
const maxNodeVisits = 200_000

// nodeDecoder is implemented by types that decode themselves from a YAML
// node. It returns a message for the operator when the node is unsuitable.
type nodeDecoder interface {
	decodeNode(n *yaml.Node) (msg string, ok bool)
}

// decode fills v (a pointer to a resource type) from the document tree,
// recording lines and collecting errors in the document.
func (d *document) decode(v any) {
	d.value(d.root, reflect.ValueOf(v).Elem(), "")
}

// errorf records a problem found while decoding.
func (d *document) errorf(path string, line int, format string, args ...any) {
	if len(d.errs) > maxErrors {
		return // ErrorList.err cuts the list short anyway
	}
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Field: path, Message: fmt.Sprintf(format, args...)})
}

// spend counts one unit of decoding work and reports whether the budget
// allows it.
func (d *document) spend(n *yaml.Node, path string) bool {
	d.visits++
	if d.visits == maxNodeVisits {
		d.errorf(path, n.Line, "document is too complex (too many aliases)")
	}
	return d.visits < maxNodeVisits
}

// typeError records that the node at path does not fit the Go type.
func (d *document) typeError(n *yaml.Node, path, want string) {
	d.bad[path] = true
	d.errorf(path, n.Line, "must be %s, got %s", want, describeNode(n))
}

func (d *document) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n, path) {
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.typeError(n, path, "a value")
			return
		}
		n = n.Alias
	}
	if isNull(n) {
		d.nulls[path] = true
		v.SetZero()
		return
	}
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(nodeDecoder); ok {
			if msg, ok := u.decodeNode(n); !ok {
				d.bad[path] = true
				d.errorf(path, n.Line, "%s", msg)
			}
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structValue(n, v, path)
	case reflect.Map:
		d.mapValue(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.typeError(n, path, "a list")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			d.lines[p] = item.Line
			d.value(item, s.Index(i), p)
		}
		v.Set(s)
	case reflect.String:
		// Any scalar is taken exactly as written, so that YAML 1.1 words
		// such as on, no or 0755 stay what the operator typed.
		if n.Kind != yaml.ScalarNode {
			d.typeError(n, path, "a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64, reflect.Int32:
		i, ok := parseYAMLInt(n)
		if !ok || v.OverflowInt(i) {
			d.typeError(n, path, "a whole number")
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		b, ok := parseYAMLBool(n)
		if !ok {
			d.typeError(n, path, "true or false")
			return
		}
		v.SetBool(b)
	default:
		panic(fmt.Sprintf("quadlet: decoder does not support %s", v.Type()))
	}
}

// structValue decodes a mapping into a struct, refusing unknown and
// duplicate fields.
func (d *document) structValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.typeError(n, path, "a mapping")
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.spend(k, path) {
			return
		}
		name, ok := d.key(k, path)
		if !ok {
			continue
		}
		p := joinPath(path, name)
		if first, dup := seen[name]; dup {
			d.errorf(p, k.Line, "duplicate key %q (first set at line %d)", name, first)
			continue
		}
		seen[name] = k.Line
		idx, ok := fields[name]
		if !ok {
			d.errorf(p, k.Line, "unknown field %q", name)
			continue
		}
		d.lines[p] = k.Line
		d.value(val, v.Field(idx), p)
	}
}

// mapValue decodes a mapping into a map with string keys.
func (d *document) mapValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.typeError(n, path, "a mapping")
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if !d.spend(k, path) {
			return
		}
		name, ok := d.key(k, path)
		if !ok {
			continue
		}
		p := path + "[" + strconv.Quote(name) + "]"
		if first, dup := seen[name]; dup {
			d.errorf(p, k.Line, "duplicate key %q (first set at line %d)", name, first)
			continue
		}
		seen[name] = k.Line
		d.lines[p] = k.Line
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(val, elem, p)
		m.SetMapIndex(reflect.ValueOf(name).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

// key returns the text of a mapping key, which must be a plain scalar.
func (d *document) key(k *yaml.Node, path string) (string, bool) {
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		k = k.Alias
	}
	switch {
	case k.Kind != yaml.ScalarNode:
		d.errorf(path, k.Line, "keys must be plain strings, got %s", describeNode(k))
		return "", false
	case k.ShortTag() == "!!merge":
		d.errorf(path, k.Line, "merge keys (<<) are not supported")
		return "", false
	}
	return k.Value, true
}

// yamlFields maps the yaml names of a struct's fields to their indexes.
func yamlFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		m[name] = i
	}
	return m
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// parseYAMLInt accepts only plain decimal integers: no quotes, no floats, no
// octal or hexadecimal, no leading zeros, no digit separators.
func parseYAMLInt(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, false
	}
	s := strings.TrimPrefix(strings.TrimPrefix(n.Value, "-"), "+")
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.ParseInt(n.Value, 10, 64)
	return i, err == nil
}

// parseYAMLBool accepts only true and false (any case YAML 1.2 allows), not
// the YAML 1.1 words yes, no, on and off.
func parseYAMLBool(n *yaml.Node) (bool, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return false, false
	}
	switch n.Value {
	case "true", "True", "TRUE":
		return true, true
	case "false", "False", "FALSE":
		return false, true
	}
	return false, false
}
