package apiserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeJSONList writes items, each converted by conv, as one JSON array
// indented as writeJSON would, encoding one item at a time: a list of
// thousands of workloads is never a buffer (and an indented copy of it) of
// its whole size.
func writeJSONList[T, U any](w http.ResponseWriter, status int, items []T, conv func(T) U) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if len(items) == 0 {
		_, _ = io.WriteString(w, "[]\n")
		return
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	var item bytes.Buffer
	enc := json.NewEncoder(&item)
	enc.SetIndent("  ", "  ")
	for i, it := range items {
		item.Reset()
		if err := enc.Encode(conv(it)); err != nil {
			return
		}
		sep := ",\n  "
		if i == 0 {
			sep = "[\n  "
		}
		_, _ = bw.WriteString(sep)
		_, _ = bw.Write(bytes.TrimSuffix(item.Bytes(), []byte("\n")))
	}
	_, _ = bw.WriteString("\n]\n")
	_ = bw.Flush()
}

func writeError(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, e.StatusCode, e)
}

// errorFor maps an error from the layers below to an API error: not found is
// 404, conflicts 409, Quadlet problems 422, oversized input 413; anything
// else is a 500 whose message is generic, so internals never leak.
func errorFor(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	var list quadlet.ErrorList
	if errors.As(err, &list) {
		return invalidQuadlet(list)
	}
	var fe *quadlet.FieldError
	if errors.As(err, &fe) {
		return invalidQuadlet(quadlet.ErrorList{fe})
	}
	switch {
	case errors.Is(err, quadlet.ErrTooLarge):
		return &api.Error{StatusCode: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, quadlet.ErrInvalidArchive):
		return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, resources.ErrInvalid):
		return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, resources.ErrNotFound):
		return &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: err.Error()}
	case errors.Is(err, resources.ErrAlreadyExists):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeAlreadyExists, Message: err.Error()}
	case errors.Is(err, resources.ErrConflict), errors.Is(err, resources.ErrNamespaceNotEmpty),
		errors.Is(err, resources.ErrProtected):
		return &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: err.Error()}
	}
	return &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal, Message: "internal error: " + err.Error()}
}

func invalidQuadlet(list quadlet.ErrorList) *api.Error {
	e := &api.Error{StatusCode: http.StatusUnprocessableEntity, Code: api.CodeInvalid, Message: list.Error()}
	for _, fe := range list {
		e.Details = append(e.Details, api.FieldDetail{File: fe.File, Line: fe.Line, Field: fe.Field, Message: fe.Message})
	}
	return e
}

func badRequest(format string, args ...any) *api.Error {
	return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// Media types the API accepts in request bodies.
var (
	jsonBody    = []string{"application/json"}
	yamlBody    = []string{"application/yaml", "application/x-yaml", "text/yaml"}
	archiveBody = []string{"application/gzip", "application/x-gzip", "application/x-tar+gzip", "application/octet-stream"}
)

// readBody reads at most limit bytes of the request body; more is a 413. A
// Content-Type that is not one of accepted is a 415, before anything is
// read.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, accepted []string) ([]byte, *api.Error) {
	if e := checkContentType(r, accepted); e != nil {
		return nil, e
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(limit)
	}
	if err != nil {
		return nil, badRequest("read request body: %v", err)
	}
	if len(b) == 0 {
		return nil, badRequest("empty request body")
	}
	return b, nil
}

// readJSON reads a JSON request body of at most limit bytes into v; what
// names the body in the error.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, what string, v any) *api.Error {
	body, apiErr := readBody(w, r, limit, jsonBody)
	if apiErr != nil {
		return apiErr
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("%s: invalid JSON: %v", what, err)
	}
	return nil
}

func tooLarge(limit int64) *api.Error {
	return &api.Error{StatusCode: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge,
		Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit)}
}

// checkContentType answers 415 unless the request's Content-Type (its media
// type, parameters aside) is one of accepted.
func checkContentType(r *http.Request, accepted []string) *api.Error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && slices.Contains(accepted, strings.ToLower(mt)) {
		return nil
	}
	msg := fmt.Sprintf("Content-Type %q is not accepted by %s %s: send %s", ct, r.Method, r.URL.Path, strings.Join(accepted, " or "))
	if ct == "" {
		msg = fmt.Sprintf("the request has no Content-Type: %s %s takes %s", r.Method, r.URL.Path, strings.Join(accepted, " or "))
	}
	return &api.Error{StatusCode: http.StatusUnsupportedMediaType, Code: api.CodeUnsupportedMediaType, Message: msg}
}
