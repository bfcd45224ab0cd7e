package quadlet

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// ErrTooLarge is wrapped by the readers (ReadDir, ReadArchive, Limits.Check)
// when an input exceeds a size or count limit.
var ErrTooLarge = errors.New("quadlet: input too large")

// FieldError is one problem found in a Quadlet file.
type FieldError struct {
	// File is the base name of the file the problem is in, for example
	// "workload.kat". It is empty when the problem is not tied to a file.
	File string
	// Line is the 1-based line of the offending field in File, or of its
	// nearest enclosing field when the field itself is missing. Zero means
	// unknown.
	Line int
	// Field is the path of the offending field, for example
	// "spec.container.volumeMounts[1].name". Map keys are written in
	// brackets and quoted: spec.nodeSelector["zone"]. It is empty when the
	// problem concerns the whole file.
	Field string
	// Message says what is wrong, in plain words.
	Message string
}

// Error formats the problem as "file:line: field: message", leaving out the
// parts that are empty or zero.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// ErrorList is every problem found in a set of Quadlet files. The parsers
// return it as their error, sorted by file and line, so that an operator sees
// all problems at once. Use errors.As to get at it, or at its first
// *FieldError.
type ErrorList []*FieldError

// Error returns the problems one per line.
func (l ErrorList) Error() string {
	parts := make([]string, len(l))
	for i, e := range l {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Unwrap returns the problems as a slice of errors, so that errors.As can
// find a *FieldError in the list.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// sorted returns the list sorted by file then line, keeping the order in
// which problems were found within one line.
func (l ErrorList) sorted() ErrorList {
	slices.SortStableFunc(l, func(a, b *FieldError) int {
		if c := cmp.Compare(a.File, b.File); c != 0 {
			return c
		}
		return cmp.Compare(a.Line, b.Line)
	})
	return l
}

// maxErrors bounds the problems reported for one parse; hostile input could
// otherwise produce millions.
const maxErrors = 100

// err returns the sorted list as an error, or nil when it is empty. A list
// longer than maxErrors is cut short with a final note.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	l = l.sorted()
	if len(l) > maxErrors {
		l = append(l[:maxErrors:maxErrors], &FieldError{Message: "too many problems; stopped looking"})
	}
	return l
}
