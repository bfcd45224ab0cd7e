package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"path"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
)

// Defaults of [HandlerConfig].
const (
	DefaultMaxBodyBytes    = 1 << 20
	DefaultRateLimit       = 60
	DefaultRateWindow      = time.Minute
	DefaultDispatchTimeout = 10 * time.Second
)

// Handler is an http.Handler serving POST .../{provider}. Make one with
// [NewHandler].
type Handler struct {
	cfg     HandlerConfig
	log     zerolog.Logger
	limiter *httprate.RateLimiter
	stats   counters
	// floodLog logs rate-limited requests, sampled so a flood cannot fill
	// the disk; the counters still count every one.
	floodLog zerolog.Logger
}

var _ http.Handler = (*Handler)(nil)

// NewHandler checks cfg, fills its defaults and returns the handler.
func NewHandler(cfg HandlerConfig) (*Handler, error) {
	if cfg.Secret == nil {
		return nil, errors.New("webhook: config has no Secret")
	}
	if cfg.Dispatcher == nil {
		return nil, errors.New("webhook: config has no Dispatcher")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.RateLimit <= 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.RateWindow <= 0 {
		cfg.RateWindow = DefaultRateWindow
	}
	if cfg.DispatchTimeout <= 0 {
		cfg.DispatchTimeout = DefaultDispatchTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, log: cfg.Logger.With().Str("component", "webhook").Logger()}
	h.stats.now = cfg.Now
	h.floodLog = h.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Minute})
	h.limiter = httprate.NewRateLimiter(cfg.RateLimit, cfg.RateWindow,
		httprate.WithLimitHandler(func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusTooManyRequests, api.CodeRateLimited,
				fmt.Sprintf("more than %d webhook requests in %s from this address", cfg.RateLimit, cfg.RateWindow))
		}))
	return h, nil
}

// rejection is why a request was refused: its outcome, status and the
// message the caller sees. The log gets the outcome and, where set, err.
type rejection struct {
	outcome Outcome
	status  int
	code    string
	message string
	err     error
}

func reject(outcome Outcome, status int, code, format string, args ...any) *rejection {
	return &rejection{outcome: outcome, status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// ServeHTTP verifies, parses and dispatches one webhook request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	provider := providerOf(r)
	label := provider
	if !knownProvider(provider) {
		label = "unknown"
	}
	addr := clientAddr(r)
	if h.limiter.RespondOnLimit(w, r, addr) {
		h.rejected(label, addr, &rejection{outcome: OutcomeRateLimited, status: http.StatusTooManyRequests})
		return
	}
	status, body, rej := h.serve(w, r, provider)
	if rej != nil {
		h.rejected(label, addr, rej)
		if rej.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		writeError(w, rej.status, rej.code, rej.message)
		return
	}
	writeJSON(w, status, body)
}

type okBody struct {
	Status  string `json:"status"`
	Matched int    `json:"matched,omitempty"`
}

// serve does the work of one request and returns the success answer or why
// it was refused.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, provider string) (int, okBody, *rejection) {
	if r.Method != http.MethodPost {
		return 0, okBody{}, reject(OutcomeMethodNotAllowed, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed,
			"method %s not allowed: webhooks are POST", r.Method)
	}
	if !knownProvider(provider) {
		return 0, okBody{}, reject(OutcomeUnknownProvider, http.StatusBadRequest, api.CodeBadRequest,
			"unknown webhook provider %q: use github, gitlab, gitea or generic", truncate(provider, 64))
	}
	body, rej := h.readBody(w, r)
	if rej != nil {
		return 0, okBody{}, rej
	}
	secret, err := h.cfg.Secret()
	if err != nil {
		rej := reject(OutcomeSecretUnavailable, http.StatusServiceUnavailable, api.CodeUnavailable, "webhook secret unavailable")
		rej.err = err
		return 0, okBody{}, rej
	}
	if rej := verify(provider, r.Header, body, secret); rej != nil {
		return 0, okBody{}, rej
	}
	switch event(provider, r.Header) {
	case eventPing:
		h.stats.add(provider, OutcomePing)
		return http.StatusOK, okBody{Status: "pong"}, nil
	case eventIgnored:
		h.stats.add(provider, OutcomeIgnored)
		return http.StatusOK, okBody{Status: "ignored"}, nil
	}
	payload, err := formPayload(r.Header, body)
	if err != nil {
		return 0, okBody{}, reject(OutcomeMalformed, http.StatusBadRequest, api.CodeBadRequest, "malformed %s form body: %v", provider, err)
	}
	push, err := ParsePayload(provider, payload)
	if err != nil {
		rej := reject(OutcomeMalformed, http.StatusBadRequest, api.CodeBadRequest, "malformed %s push payload: %v", provider, err)
		return 0, okBody{}, rej
	}
	observePush(r.Context(), push)
	h.log.Debug().Str("hop", "webhook-received").Str("ref", push.Ref).Str("commit", push.After).Msg("hop")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.DispatchTimeout)
	defer cancel()
	matched, err := h.cfg.Dispatcher.DispatchPush(ctx, push)
	if err != nil {
		rej := reject(OutcomeDispatchFailed, http.StatusServiceUnavailable, api.CodeUnavailable, "webhook could not be dispatched, try again later")
		rej.err = err
		return 0, okBody{}, rej
	}
	if matched == 0 {
		return 0, okBody{}, reject(OutcomeNoMatch, http.StatusNotFound, api.CodeNotFound,
			"no source matches repository %s and ref %s", truncate(push.RepoURLs[0], 256), truncate(push.Ref, 256))
	}
	h.stats.add(provider, OutcomeAccepted)
	h.log.Info().Str("provider", provider).Str("ref", push.Ref).Str("after", push.After).
		Int("matched", matched).Msg("webhook accepted")
	return http.StatusAccepted, okBody{Status: "accepted", Matched: matched}, nil
}

// readBody reads at most MaxBodyBytes of the body; more is a 413.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *rejection) {
	limit := h.cfg.MaxBodyBytes
	tooLarge := reject(OutcomeTooLarge, http.StatusRequestEntityTooLarge, api.CodeTooLarge,
		"webhook body is larger than the limit of %d bytes", limit)
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge
	}
	if err != nil {
		rej := reject(OutcomeMalformed, http.StatusBadRequest, api.CodeBadRequest, "read webhook body: %v", err)
		rej.err = err
		return nil, rej
	}
	return b, nil
}

// formPayload returns the JSON of body: GitHub and Gitea can send it as the
// "payload" field of a form (Content-Type application/x-www-form-urlencoded),
// signed over the whole form body.
func formPayload(h http.Header, body []byte) ([]byte, error) {
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if ct != "application/x-www-form-urlencoded" {
		return body, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("decode form: %w", err)
	}
	if !form.Has("payload") {
		return nil, errors.New(`form has no "payload" field`)
	}
	return []byte(form.Get("payload")), nil
}

// rejected logs and counts one refused request.
func (h *Handler) rejected(provider, addr string, rej *rejection) {
	h.stats.add(provider, rej.outcome)
	ev := h.log.Warn()
	if rej.outcome == OutcomeRateLimited {
		ev = h.floodLog.Warn()
	}
	if rej.status >= 500 {
		ev = h.log.Error()
	}
	if rej.err != nil {
		ev = ev.AnErr("error", rej.err)
	}
	ev.Str("provider", provider).Str("reason", string(rej.outcome)).Int("status", rej.status).
		Str("remote_addr", addr).Msg("webhook rejected")
}

// providerOf returns the chi URL parameter "provider" when set, else the
// last segment of the request path.
func providerOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		if p := rc.URLParam("provider"); p != "" {
			return p
		}
	}
	return path.Base(path.Clean("/" + r.URL.Path))
}

func knownProvider(p string) bool {
	switch p {
	case ProviderGitHub, ProviderGitLab, ProviderGitea, ProviderGeneric:
		return true
	}
	return false
}

// clientAddr is the rate limit key: the client IP set by one of chi's
// ClientIPFrom* middlewares when present (so a trusted proxy setup is
// honoured), else the connection's remote address. Forwarded headers are
// never read here.
func clientAddr(r *http.Request) string {
	if ip := middleware.GetClientIP(r.Context()); ip != "" {
		return httprate.CanonicalizeIP(ip)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(host)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, api.Error{Code: code, Message: message})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
