package apiserver

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
)

// authenticateMetrics admits a scrape of /metrics that presents a client
// certificate of the cluster CA (the API's TLS configuration verified it:
// a node's, or one the operator had the CA sign for Prometheus) or, like
// the rest of the API, the admin bearer token.
func (s *Server) authenticateMetrics(next http.Handler) http.Handler {
	token := s.authenticate(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := peerCN(r); ok {
			next.ServeHTTP(w, r)
			return
		}
		token.ServeHTTP(w, r)
	})
}

// issueMetricsCert signs a scraper's certificate signing request as a
// metrics certificate (api.MetricsCertPrefix + its name): it may scrape
// /metrics on every agent and API port, and nothing else.
func (s *Server) issueMetricsCert(w http.ResponseWriter, r *http.Request) {
	if s.cfg.SignMetricsCert == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal,
			Message: "this server cannot issue metrics certificates: ask the leader's API"})
		return
	}
	req, ok := readChecked(s, w, r, jsonBody, "metrics certificate request", checkMetricsCertRequest)
	if !ok {
		return
	}
	noteName(r, req.Name)
	days := req.ValidityDays
	if days == 0 {
		days = api.DefaultMetricsCertDays
	}
	certPEM, err := s.cfg.SignMetricsCert(r.Context(), req.Name, []byte(req.CSR), time.Duration(days)*24*time.Hour)
	if err != nil {
		writeError(w, errorFor(fmt.Errorf("issue the metrics certificate of %s: %w", req.Name, err)))
		return
	}
	cert, err := pki.ParseCertificate(certPEM)
	if err != nil {
		writeError(w, errorFor(fmt.Errorf("issue the metrics certificate of %s: %w", req.Name, err)))
		return
	}
	s.cfg.Logger.Info().Str("name", req.Name).Time("not_after", cert.NotAfter).Msg("issued a metrics certificate")
	writeJSON(w, http.StatusOK, api.MetricsCertResponse{Certificate: string(certPEM), CA: string(s.cfg.CACertPEM), NotAfter: cert.NotAfter.UTC()})
}

// checkMetricsCertRequest lists what is wrong with a metrics certificate
// request, each problem naming its field.
func checkMetricsCertRequest(req api.MetricsCertRequest) []api.FieldDetail {
	var out []api.FieldDetail
	if req.ValidityDays < 0 || req.ValidityDays > api.MaxMetricsCertDays {
		out = append(out, api.FieldDetail{Field: "validityDays", Message: fmt.Sprintf("must be 1 to %d (0: %d), got %d", api.MaxMetricsCertDays, api.DefaultMetricsCertDays, req.ValidityDays)})
	}
	if msg := quadlet.DNSLabelProblem(req.Name); msg != "" {
		out = append(out, api.FieldDetail{Field: "name", Message: msg})
	}
	block, _ := pem.Decode([]byte(req.CSR))
	switch {
	case req.CSR == "":
		out = append(out, api.FieldDetail{Field: "csr", Message: "required: a PEM-encoded certificate signing request"})
	case block == nil || block.Type != "CERTIFICATE REQUEST":
		out = append(out, api.FieldDetail{Field: "csr", Message: "not a PEM block of type CERTIFICATE REQUEST"})
	default:
		csr, err := x509.ParseCertificateRequest(block.Bytes)
		if err == nil {
			err = csr.CheckSignature()
		}
		if err != nil {
			out = append(out, api.FieldDetail{Field: "csr", Message: err.Error()})
		}
	}
	return out
}

// peerCN is the common name of the client certificate that r's TLS
// configuration verified, and whether there is one.
func peerCN(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName, true
}

// isMetricsCert reports whether r came with a metrics certificate (see
// api.MetricsCertPrefix) that the TLS configuration verified.
func isMetricsCert(r *http.Request) bool {
	cn, ok := peerCN(r)
	return ok && strings.HasPrefix(cn, api.MetricsCertPrefix)
}

// MetricsHandler serves Config.Metrics at GET /metrics alone, with
// the API's authentication of a scrape (a client certificate of the
// cluster CA, or the admin token with the blocking of failed attempts): a
// member that does not lead answers scrapes with its own figures so.
func (s *Server) MetricsHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.ClientIPFromRemoteAddr)
	jsonRouteErrors(r)
	s.routeMetrics(r)
	return r
}

// routeMetrics serves Config.Metrics, when set, at GET /metrics to
// the callers authenticateMetrics admits.
func (s *Server) routeMetrics(r chi.Router) {
	if s.cfg.Metrics != nil {
		r.With(s.authenticateMetrics).Get("/metrics", s.cfg.Metrics.ServeHTTP)
	}
}

// metricsCertScrapesOnly answers 403 to a metrics certificate anywhere but
// /metrics and /healthz.
func metricsCertScrapesOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isMetricsCert(r) && r.URL.Path != "/metrics" && r.URL.Path != "/healthz" {
			writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
				Message: "a metrics certificate may only scrape /metrics"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
