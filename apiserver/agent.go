package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"kat.dws.rip/kat/api"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/rs/zerolog"
)

// ErrUnknownBuild is what AgentConfig.BuildLog returns (wrapped) for a build
// the node has no log of; the agent API answers 404.
var ErrUnknownBuild = errors.New("apiserver: unknown build")

// ErrUnknownInstance is what AgentConfig.Logs returns (wrapped) for an
// instance the node does not run; the agent API answers 404.
var ErrUnknownInstance = errors.New("apiserver: unknown instance")

// ErrNoPreviousRun is what AgentConfig.Logs returns (wrapped) for the
// previous run of an instance whose container has not restarted; the agent
// API answers 404.
var ErrNoPreviousRun = errors.New("apiserver: no previous run")

// AgentConfig holds the dependencies of the agent API. Serve it on the node's
// agent port with a TLS configuration that requires and verifies a client
// certificate of the cluster CA (pki.ServerTLSConfig with requireClientCert, or pki.ServerTLS with
// tls.RequireAndVerifyClientCert),
// so only the leader and other nodes can call it.
type AgentConfig struct {
	// Logs writes an instance's container output to w as opts selects;
	// with opts.Follow it keeps writing until ctx ends or the instance
	// leaves the node. Required.
	Logs func(ctx context.Context, instanceID string, opts api.LogOptions, w io.Writer) error
	// Exec returns how to run a command in the container of instance
	// instanceID; an error wrapping ErrUnknownInstance is a 404. Default
	// nil: the node runs no commands.
	Exec func(ctx context.Context, instanceID string) (ExecFunc, error)
	// BuildLog writes the log of the build of commit (full, or its first 12
	// digits) of workload ns/name on this node to w; an error wrapping
	// ErrUnknownBuild is a 404. Default nil: every build log is a 404.
	BuildLog func(ctx context.Context, ns, name, commit string, w io.Writer) error
	// Metrics, when set, serves GET /metrics (Prometheus text format) to
	// anyone the port's mutual TLS admits, metrics certificates (see
	// api.MetricsCertPrefix) included; they get 403 on every other route.
	// Default nil: not served.
	Metrics http.Handler
	Logger  zerolog.Logger
}

// AgentHandler returns the agent API's handler:
//
//	GET /v1alpha1/instances/{id}/logs?follow=true&tail=N&since=TIME&timestamps=true&previous=true
//	POST /v1alpha1/instances/{id}/exec?command=sh&command=-c&command=...&stdin=true&tty=true (Upgrade: api.ExecProtocol)
//	GET /v1alpha1/builds/{ns}/{name}/{commit}/log
//	GET /metrics
func AgentHandler(cfg AgentConfig) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(metricsCertScrapesOnly)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if cfg.Metrics != nil {
		r.Get("/metrics", cfg.Metrics.ServeHTTP)
	}
	r.Get("/v1alpha1/instances/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		opts, err := api.ParseLogOptions(r.URL.Query().Get, time.Now())
		if err != nil {
			writeError(w, badRequest("%v", err))
			return
		}
		id := chi.URLParam(r, "id")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fw := &flushWriter{w: w, rc: http.NewResponseController(w)}
		start := time.Now()
		err = cfg.Logs(r.Context(), id, opts, fw)
		switch {
		case errors.Is(err, ErrUnknownInstance) && !fw.wrote:
			writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
				Message: fmt.Sprintf("instance %s does not run on this node", id)})
		case errors.Is(err, ErrNoPreviousRun) && !fw.wrote:
			writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
				Message: fmt.Sprintf("instance %s has no previous run: its container has not restarted", id)})
		case err != nil && !fw.wrote:
			writeError(w, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
				Message: fmt.Sprintf("read the log of instance %s: %v", id, err)})
		case err != nil:
			cfg.Logger.Warn().Err(err).Str("instance", id).Msg("log stream ended with an error")
		}
		cfg.Logger.Debug().Str("instance", id).Bool("follow", opts.Follow).Dur("duration", time.Since(start)).Msg("served logs")
	})
	r.Post("/v1alpha1/instances/{id}/exec", func(w http.ResponseWriter, r *http.Request) { serveExec(w, r, cfg) })
	r.Get("/v1alpha1/builds/{ns}/{name}/{commit}/log", func(w http.ResponseWriter, r *http.Request) {
		ns, name, commit := chi.URLParam(r, "ns"), chi.URLParam(r, "name"), chi.URLParam(r, "commit")
		if cfg.BuildLog == nil {
			writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "this node does not build images"})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fw := &flushWriter{w: w, rc: http.NewResponseController(w)}
		err := cfg.BuildLog(r.Context(), ns, name, commit, fw)
		switch {
		case errors.Is(err, ErrUnknownBuild) && !fw.wrote:
			writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
				Message: fmt.Sprintf("this node has no log of the build of %s/%s at %s", ns, name, commit)})
		case err != nil && !fw.wrote:
			writeError(w, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
				Message: fmt.Sprintf("read the log of the build of %s/%s at %s: %v", ns, name, commit, err)})
		case err != nil:
			cfg.Logger.Warn().Err(err).Str("workload", ns+"/"+name).Msg("build log ended with an error")
		}
	})
	return r
}

// flushWriter flushes after every write.
type flushWriter struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	wrote bool
}

func (f *flushWriter) Write(p []byte) (int, error) {
	if !f.wrote {
		f.wrote = true
		f.w.WriteHeader(http.StatusOK)
	}
	n, err := f.w.Write(p)
	_ = f.rc.Flush()
	return n, err
}
