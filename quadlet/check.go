package quadlet

import (
	"fmt"
	"strings"
)

// checker reports validation problems for one decoded document, finding the
// line of each field from what the decoder recorded.
type checker struct {
	doc  *document
	errs *ErrorList
}

func (d *document) checker(errs *ErrorList) *checker {
	return &checker{doc: d, errs: errs}
}

// has reports whether the field at path was written with a non-null value.
func (c *checker) has(path string) bool {
	_, ok := c.doc.lines[path]
	return ok && !c.doc.nulls[path]
}

// line returns the line of the field at path, or of its nearest enclosing
// field that exists.
func (c *checker) line(path string) int {
	for path != "" {
		if l, ok := c.doc.lines[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return c.doc.root.Line
}

// failed reports whether the field at path, or a field enclosing it, could
// not be decoded. Problems about such fields are not reported again.
func (c *checker) failed(path string) bool {
	for path != "" {
		if c.doc.bad[path] {
			return true
		}
		path = parentPath(path)
	}
	return false
}

// errorf records a problem with the field at path.
func (c *checker) errorf(path string, format string, args ...any) {
	if c.failed(path) || len(*c.errs) > maxErrors {
		return
	}
	*c.errs = append(*c.errs, &FieldError{
		File:    c.doc.file,
		Line:    c.line(path),
		Field:   path,
		Message: fmt.Sprintf(format, args...),
	})
}

// required reports the field at path as missing unless it is present.
func (c *checker) required(path string) bool {
	if c.has(path) {
		return true
	}
	c.errorf(path, "is required")
	return false
}

// oneOf reports a value outside the allowed set.
func (c *checker) oneOf(path, value string, allowed ...string) bool {
	for _, a := range allowed {
		if value == a {
			return true
		}
	}
	c.errorf(path, "must be one of %s, got %q", strings.Join(allowed, ", "), value)
	return false
}

// atLeast reports a number below min.
func (c *checker) atLeast(path string, value, minimum int) {
	if value < minimum {
		c.errorf(path, "must be at least %d, got %d", minimum, value)
	}
}

// between reports a number outside minimum..maximum.
func (c *checker) between(path string, value, minimum, maximum int) {
	if value < minimum || value > maximum {
		c.errorf(path, "must be %d to %d, got %d", minimum, maximum, value)
	}
}

// check reports problems found by a validation function returning a message.
func (c *checker) check(path, value string, validate func(string) string) {
	if msg := validate(value); msg != "" {
		c.errorf(path, "%s", msg)
	}
}

// parentPath strips the last element from a field path.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if strings.HasSuffix(path, "\"]") {
			// A quoted map key: find the `["` that opens it.
			if i := strings.LastIndex(path, "[\""); i >= 0 {
				return path[:i]
			}
		}
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// checkHeader checks apiVersion and kind of a decoded document.
func (c *checker) checkHeader(kind string) {
	if c.required("apiVersion") && c.doc.apiVersion != APIVersion {
		c.errorf("apiVersion", "must be %q, got %q", APIVersion, c.doc.apiVersion)
	}
	if c.required("kind") && c.doc.kind != kind {
		c.errorf("kind", "must be %q, got %q", kind, c.doc.kind)
	}
}
