package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// APIError is a call to Podman's REST service that failed. Error names the
// podman command the call stands for and the service's message (the words
// the podman CLI would have printed); Unwrap yields the matching sentinel
// (ErrNotFound, ...) when one applies, the context's error when the
// context ended the call, or what kept it from being answered.
type APIError struct {
	// Op is the podman command the call stands for, for example
	// "podman create".
	Op string
	// Method and Path are the call's; Path without the API's prefix.
	Method, Path string
	// Status is the HTTP status of the answer, 0 when none came.
	Status int
	// Message is the service's message, trimmed and capped.
	Message string
	// Err is a sentinel, a context error or the transport's error.
	Err error
}

func (e *APIError) Error() string { return failure(e.Op, e.Message, e.Err) }

func (e *APIError) Unwrap() error { return e.Err }

// errStatus stands for an error answer no sentinel matches.
var errStatus = errors.New("error answer")

// request is one call to the service.
type request struct {
	// op is the podman command the call stands for, for errors.
	op string
	// method and path (without apiPrefix, its names escaped: pathOf).
	method, path string
	query        url.Values
	// body, when not nil, is sent as JSON.
	body any
	// header holds further request headers.
	header http.Header
}

// call sends one request to the service, starting the service first when
// it does not run, and returns the answer for the caller to read and close.
// An answer with a status of 400 or above is an *APIError, as is a call
// that got no answer.
func (p *Podman) call(ctx context.Context, r request) (*http.Response, error) {
	var raw []byte
	if r.body != nil {
		var err error
		if raw, err = json.Marshal(r.body); err != nil {
			return nil, fmt.Errorf("%s: encode the request: %w", r.op, err)
		}
	}
	fail := func(status int, msg string, err error) error {
		ae := &APIError{Op: r.op, Method: r.method, Path: r.path, Status: status, Message: msg, Err: err}
		switch {
		case ctx.Err() != nil:
			ae.Err = ctx.Err()
		case status != 0:
			if s := classify(msg); s != nil {
				ae.Err = s
			} else if h := p.hostPrerequisiteHint(msg); h != nil {
				ae.Err = h
			}
		}
		return ae
	}
	u := "http://podman" + apiPrefix + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		if err := p.svc.ensure(ctx); err != nil {
			return nil, fail(0, "", err)
		}
		req, err := http.NewRequestWithContext(ctx, r.method, u, bytes.NewReader(raw))
		if err != nil {
			return nil, fail(0, "", err)
		}
		for k, v := range r.header {
			req.Header[k] = v
		}
		if r.body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err = p.svc.client.Do(req)
		if err == nil {
			break
		}
		// A service that died (or exited idle) since it was checked
		// got nothing: start it again and send the call once more.
		if !lost(err) || attempt > 0 || ctx.Err() != nil {
			return nil, fail(0, "", err)
		}
	}
	if resp.StatusCode < 400 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return nil, fail(resp.StatusCode, errorMessage(b), errStatus)
}

// callJSON is call for a JSON answer, which it decodes into out (unless
// out is nil).
func (p *Podman) callJSON(ctx context.Context, r request, out any) error {
	resp, err := p.call(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", r.op, err)
	}
	return nil
}

// errorMessage returns the message of the service's error body
// ({"cause": ..., "message": ..., "response": status}), or the body itself.
func errorMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
		Cause   string `json:"cause"`
	}
	if json.Unmarshal(body, &e) == nil && (e.Message != "" || e.Cause != "") {
		if e.Message == "" {
			e.Message = e.Cause
		}
		return trimStderr([]byte(e.Message))
	}
	return trimStderr(body)
}

// pathOf joins a path of the API with escaped name elements:
// pathOf("/containers/%s/start", id).
func pathOf(format string, names ...string) string {
	esc := make([]any, len(names))
	for i, n := range names {
		esc[i] = url.PathEscape(n)
	}
	return fmt.Sprintf(format, esc...)
}

// filtersQuery renders podman's filters parameter: a JSON object of lists.
func filtersQuery(filters map[string][]string) string {
	b, err := json.Marshal(filters)
	if err != nil {
		panic(err) // maps of strings always marshal
	}
	return string(b)
}

// labelFilters are the label filters of the managed containers carrying
// labels: key=value, sorted.
func labelFilters(labels map[string]string) []string {
	out := []string{LabelManaged + "=true"}
	for _, k := range sortedKeys(labels) {
		if k != LabelManaged {
			out = append(out, k+"="+labels[k])
		}
	}
	return out
}

// isStatus reports whether err is an *APIError with status code.
func isStatus(err error, code int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == code
}
