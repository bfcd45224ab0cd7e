package server

import "net/http"

// authenticateMetrics admits a scrape of /metrics that presents a client
// certificate of the cluster CA (the API's TLS configuration verified it:
// a node's, or one the operator had the CA sign for Prometheus) or, like
// the rest of the API, the admin bearer token.
func (s *Server) authenticateMetrics(next http.Handler) http.Handler {
	token := s.authenticate(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			next.ServeHTTP(w, r)
			return
		}
		token.ServeHTTP(w, r)
	})
}
