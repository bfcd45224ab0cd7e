package apiserver

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/go-chi/httprate"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/store/resources"
)

// Defaults of Config.
const (
	DefaultMaxArchiveBytes = 1 << 20
	DefaultMaxJSONBytes    = 64 << 10
	DefaultRateLimit       = 1000
	DefaultAuthFailures    = 20
	DefaultNodeLossTimeout = 60 * time.Second
	defaultRequestTimeout  = 30 * time.Second
)

// Config holds a Server's dependencies and limits.
type Config struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// AdminTokenHash is the hex SHA-256 of the admin bearer token. Required.
	AdminTokenHash string
	// Leader returns the current leader for the status endpoint; nil reports
	// the leader recorded in etcd.
	Leader func(ctx context.Context) (*api.Leader, error)
	// NodeLossTimeout is how old a node's last heartbeat may be before the node
	// is NotReady. Default 60s (cluster.kat nodeLossTimeoutSeconds).
	NodeLossTimeout time.Duration
	// TermStart is when this leader's term began: a node whose last
	// heartbeat is older counts as having beat then
	// (resources.HeartbeatInTerm), as the leader's placement counts it, so
	// katcall shows no node NotReady that the leader still treats as Ready.
	// Zero: heartbeats count as they are.
	TermStart time.Time
	// MaxArchiveBytes caps a workload upload (compressed). Default 1 MiB.
	MaxArchiveBytes int64
	// MaxJSONBytes caps any other request body. Default 64 KiB.
	MaxJSONBytes int64
	// RateLimit is the number of requests per second one client address may
	// make, a guard against runaway scripts. Default 1000; negative disables
	// limiting.
	RateLimit int
	// AuthFailureLimit is how many requests with a missing or wrong token one
	// address may make per minute; past it every request from that address,
	// even one with the right token, is answered 429 until the rate falls, so
	// the token cannot be guessed. Default 20; negative disables it.
	AuthFailureLimit int
	// Forwarder, when set, reports whether a request's TCP peer is an etcd
	// member that forwards the API to the leader. From such a peer the
	// client's address is the last X-Forwarded-For entry, the one the
	// member set, so that the rate limit, the blocking of failed
	// authentication and the audit count the client, never the member
	// that every client of it shares. Any other peer's header is ignored:
	// a client cannot choose its address. Default nil: none.
	Forwarder func(peer netip.Addr) bool
	// Logger receives one line per request: info for writes, debug for reads.
	Logger zerolog.Logger
	// Now replaces time.Now, for tests.
	Now func() time.Time
	// GitOps is the leader's Git sync, for sync, suspend and resume; nil
	// answers sync with 503 and makes suspend/resume only flip the flag.
	GitOps GitOps
	// Webhooks, when set, serves POST /v1alpha1/webhooks/{provider}
	// outside the bearer-token authentication: webhooks authenticate by
	// signature.
	Webhooks http.Handler
	// AgentTransport reaches agents' APIs (mutual TLS with this node's
	// certificate), to proxy logs. Default nil: logs are unavailable.
	AgentTransport http.RoundTripper
	// CACertPEM is the cluster CA certificate, served to anyone at
	// api.CACertPath. Default none: not served.
	CACertPEM []byte
	// Join admits nodes at api.JoinPath once the server has checked the
	// join secret and the request. Default nil: joins are not served.
	Join Joiner
	// ForgetNode, when set, is called by DELETE /v1alpha1/nodes/{node}
	// before the node's records are removed, to drop what else identifies
	// the node (its etcd user), so its name can join again as another
	// node. An error leaves the node in place. Default nil: nothing else.
	ForgetNode func(ctx context.Context, name string) error
	// RotateJoinToken issues a new join token, makes it the only one that
	// admits nodes, and returns it whole (katjoin1.SECRET.FINGERPRINT).
	// Default nil: POST /v1alpha1/join-token answers 503.
	RotateJoinToken func(ctx context.Context) (string, error)
	// SignMetricsCert signs csrPEM (checked) as the client certificate of
	// the scraper name, with the common name api.MetricsCertPrefix+name,
	// valid for validity, and returns it PEM-encoded. Default nil: POST
	// api.MetricsCertPath answers 503.
	SignMetricsCert func(ctx context.Context, name string, csrPEM []byte, validity time.Duration) ([]byte, error)
	// NodeOverlay records a node's WireGuard public key and port, from
	// its status reports, in the cluster's overlay records (the node's
	// subnet, key and endpoint). It is called once per node and leader
	// term, and again when the report changes. Default nil: reports'
	// overlay is not recorded.
	NodeOverlay func(ctx context.Context, node string, o api.NodeOverlay) error
	// Backup takes an etcd snapshot now, for POST api.BackupPath (katcall
	// backup). Default nil: that endpoint answers 503.
	Backup func(ctx context.Context) (*api.Backup, error)
	// Metrics, when set, serves GET /metrics (Prometheus text format) to
	// callers with the admin token or a client certificate of the cluster
	// CA (authenticateMetrics). Default nil: not served.
	Metrics http.Handler
	// AuditKeep is how many entries the audit log keeps in etcd (the
	// oldest go first). Default resources.DefaultAuditKeep (1000).
	AuditKeep int
	// AuditLogger receives one line per audit entry. Default: Logger.
	AuditLogger *zerolog.Logger
	// AuditUnauthenticatedLimit is how many entries of calls that showed
	// no valid credential (actor anonymous, a webhook refused before its
	// signature was checked) the audit log stores in etcd per minute;
	// past it they are only logged, so that nobody without a credential
	// can push operators' calls out of the list. Default 60.
	AuditUnauthenticatedLimit int
	// WorkloadInstances, when set, returns a workload's assignments
	// (without their files) and its instances' latest reports by instance
	// ID from a watch-fed copy of the store (the leader's), or false while
	// that copy is not ready; the workload's status, logs and exec read
	// them there instead of listing every assignment in etcd. Default nil:
	// read from etcd.
	WorkloadInstances func(ns, name string) ([]api.Assignment, map[string]api.InstanceStatus, bool)
	// Secrets, when set, serves the cluster's age recipient and the
	// delivery of secrets to the nodes that use them. Default nil: those
	// answer 503.
	Secrets *SecretKeys
}

// Server serves the v1alpha1 API.
type Server struct {
	cfg          Config
	authFailures *httprate.RateLimiter
	// facts records what nodes report: status, build records, events.
	facts *resources.NodeFacts
	// auditLog is AuditLogger, or Logger.
	auditLog zerolog.Logger
	// auditUnauthenticated limits the stored entries of unauthenticated
	// calls (AuditUnauthenticatedLimit).
	auditUnauthenticated *httprate.RateLimiter
	// secretUses are the secrets of the assignments' specs, for the
	// delivery of secrets to nodes.
	secretUses secretUses
	// agentUpgrades is AgentTransport speaking HTTP/1.1 only, for exec.
	agentUpgrades http.RoundTripper
}

// New checks cfg, applies defaults and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Repo == nil {
		return nil, errors.New("configure the API server: Config.Repo is required")
	}
	if cfg.AdminTokenHash == "" {
		return nil, errors.New("configure the API server: Config.AdminTokenHash is required")
	}
	if cfg.NodeLossTimeout <= 0 {
		cfg.NodeLossTimeout = DefaultNodeLossTimeout
	}
	if cfg.MaxArchiveBytes <= 0 {
		cfg.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if cfg.MaxJSONBytes <= 0 {
		cfg.MaxJSONBytes = DefaultMaxJSONBytes
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.AuthFailureLimit == 0 {
		cfg.AuthFailureLimit = DefaultAuthFailures
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuditKeep <= 0 {
		cfg.AuditKeep = resources.DefaultAuditKeep
	}
	if cfg.AuditUnauthenticatedLimit <= 0 {
		cfg.AuditUnauthenticatedLimit = DefaultAuditUnauthenticated
	}
	s := &Server{cfg: cfg, facts: resources.NewNodeFacts(cfg.Repo, cfg.NodeOverlay)}
	if cfg.AuthFailureLimit > 0 {
		s.authFailures = httprate.NewRateLimiter(cfg.AuthFailureLimit, time.Minute)
	}
	s.auditLog = cfg.Logger
	if cfg.AuditLogger != nil {
		s.auditLog = *cfg.AuditLogger
	}
	s.auditUnauthenticated = httprate.NewRateLimiter(cfg.AuditUnauthenticatedLimit, time.Minute)
	s.agentUpgrades = http1Only(cfg.AgentTransport)
	return s, nil
}

// Handler returns the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.forwardedClient)
	r.Use(middleware.ClientIPFromRemoteAddr)
	r.Use(s.accessLog)
	r.Use(s.audit(r))
	r.Use(middleware.Recoverer)
	r.Use(metricsCertScrapesOnly)
	if s.cfg.RateLimit > 0 {
		r.Use(httprate.LimitBy(s.cfg.RateLimit, time.Second,
			func(r *http.Request) (string, error) {
				return httprate.CanonicalizeIP(middleware.GetClientIP(r.Context())), nil
			},
			httprate.WithLimitHandler(func(w http.ResponseWriter, _ *http.Request) {
				writeError(w, &api.Error{StatusCode: http.StatusTooManyRequests, Code: api.CodeRateLimited,
					Message: "too many requests from this address, slow down"})
			})))
	}
	jsonRouteErrors(r)
	r.Get("/healthz", s.health)
	s.routeMetrics(r)
	if s.cfg.Webhooks != nil {
		r.Handle("/v1alpha1/webhooks/{provider}", s.cfg.Webhooks)
	}
	// Routes without the request timeout: followed logs and watched
	// events stream for long.
	r.With(s.authenticate).Get("/v1alpha1/n/{ns}/workloads/{name}/logs", s.workloadLogs)
	r.With(s.authenticate).Get("/v1alpha1/events", s.listEvents)
	r.With(s.authenticate).Post("/v1alpha1/n/{ns}/workloads/{name}/exec", s.workloadExec)
	r.With(s.authenticateNode, middleware.Timeout(defaultRequestTimeout)).Post("/v1alpha1/nodes/{node}/status", s.postNodeStatus)
	r.With(s.authenticateNode, middleware.Timeout(defaultRequestTimeout)).Put("/v1alpha1/nodes/{node}/builds/{ns}/{name}/{commit}", s.putNodeBuildRecord)
	r.With(s.authenticateNode, middleware.Timeout(defaultRequestTimeout)).Post("/v1alpha1/nodes/{node}/events", s.postNodeEvent)
	r.With(s.requireNodeCert, middleware.Timeout(defaultRequestTimeout)).Get("/v1alpha1/nodes/{node}/secrets/{ns}/{name}", s.deliverSecret)
	r.With(s.requireNodeCert, middleware.Timeout(defaultRequestTimeout)).Get("/v1alpha1/nodes/{node}/ingress/certificates/{kind}/{name}", s.deliverIngressCertificate)
	r.With(s.authenticateNode, middleware.Timeout(defaultRequestTimeout)).Post("/v1alpha1/nodes/{node}/depart", s.postNodeDeparture)
	r.With(s.authenticateNode, middleware.Timeout(defaultRequestTimeout)).Post("/v1alpha1/nodes/{node}/handback", s.postHandBack)
	if len(s.cfg.CACertPEM) > 0 {
		r.Get(api.CACertPath, s.getCA)
	}
	if s.cfg.Join != nil {
		r.With(middleware.Timeout(defaultRequestTimeout)).Post(api.JoinPath, s.postJoin)
	}
	r.Route("/v1alpha1", func(r chi.Router) {
		r.Use(s.authenticate)
		r.Use(middleware.Timeout(defaultRequestTimeout))
		r.Get("/status", s.status)
		r.Get("/config/cluster", s.clusterConfig)
		r.Get("/cluster/servers", s.clusterServers)
		r.Post("/cluster/backup", s.postBackup)
		r.Get("/nodes", s.listNodes)
		r.Get("/nodes/{node}", s.getNode)
		r.Delete("/nodes/{node}", s.deleteNode)
		r.Post("/nodes/{node}/cordon", s.cordonNode)
		r.Post("/nodes/{node}/uncordon", s.uncordonNode)
		r.Post("/nodes/{node}/drain", s.drainNode)
		r.Patch("/nodes/{node}/labels", s.patchNodeLabels)
		r.Patch("/nodes/{node}/taints", s.patchNodeTaints)
		r.Post("/join-token", s.rotateJoinToken)
		r.Post("/metrics-certificates", s.issueMetricsCert)
		r.Get("/namespaces", s.listNamespaces)
		r.Post("/namespaces", s.createNamespace)
		r.Get("/namespaces/{ns}", s.getNamespace)
		r.Put("/namespaces/{ns}", s.putNamespace)
		r.Delete("/namespaces/{ns}", s.deleteNamespace)
		r.Get("/workloads", s.listAllWorkloads)
		r.Route("/n/{ns}/workloads", func(r chi.Router) {
			r.Get("/", s.listWorkloads)
			r.Post("/", s.createWorkload)
			r.Put("/", s.upsertWorkload)
			r.Get("/{name}", s.getWorkload)
			r.Put("/{name}", s.putWorkload)
			r.Delete("/{name}", s.deleteWorkload)
			r.Get("/{name}/files/{file}", s.getWorkloadFile)
			r.Post("/{name}/suspend", s.suspendWorkload)
			r.Post("/{name}/resume", s.resumeWorkload)
			r.Get("/{name}/status", s.getWorkloadStatus)
			r.Get("/{name}/history", s.getWorkloadHistory)
			r.Get("/{name}/rollout", s.getWorkloadRollout)
			r.Post("/{name}/rollback", s.rollbackWorkload)
		})
		r.Get("/sources", s.listSources)
		r.Get("/sources/{source}", s.getSource)
		r.Put("/sources/{source}", s.putSource)
		r.Delete("/sources/{source}", s.deleteSource)
		r.Post("/sources/{source}/sync", s.syncSources)
		r.Post("/sync", s.syncSources)
		r.Get("/jobs", s.listJobRuns)
		r.Get(strings.TrimPrefix(api.IngressPath, "/v1alpha1"), s.listIngress)
		r.Get(strings.TrimPrefix(api.IngressCertificatesPath, "/v1alpha1"), s.listIngressCertificates)
		r.Delete(strings.TrimPrefix(api.IngressCertificatesPath, "/v1alpha1")+"/{kind}/{name}", s.deleteIngressCertificate)
		r.Get("/audit", s.listAudit)
		s.routeSecrets(r)
	})
	return r
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr, blocked := s.refuseBlocked(w, r)
		if blocked {
			return
		}
		h := r.Header.Get("Authorization")
		token, ok := strings.CutPrefix(h, "Bearer ")
		valid := ok && resources.TokenMatches(s.cfg.AdminTokenHash, strings.TrimSpace(token))
		if !valid && s.authFailures != nil {
			s.authFailures.OnLimit(headerSink{}, r, addr)
		}
		switch {
		case h == "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="kat"`)
			writeError(w, &api.Error{StatusCode: http.StatusUnauthorized, Code: api.CodeUnauthorized,
				Message: "missing bearer token: send the admin token from katcall.yaml in the Authorization header"})
		case !valid:
			w.Header().Set("WWW-Authenticate", `Bearer realm="kat", error="invalid_token"`)
			writeError(w, &api.Error{StatusCode: http.StatusUnauthorized, Code: api.CodeUnauthorized,
				Message: "invalid bearer token"})
		default:
			noteActor(r, api.ActorAdmin)
			next.ServeHTTP(w, r)
		}
	})
}

// jsonRouteErrors makes r answer an unknown path 404 and a method a path
// does not take 405, as the API's JSON errors.
func jsonRouteErrors(r chi.Router) {
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &api.Error{StatusCode: http.StatusMethodNotAllowed, Code: api.CodeBadRequest,
			Message: r.Method + " is not allowed on " + r.URL.Path})
	})
}

// forwardedClient gives a request that a member forwarded (see
// Config.Forwarder) the remote address of the client it came from.
func (s *Server) forwardedClient(next http.Handler) http.Handler {
	if s.cfg.Forwarder == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if client, ok := s.forwardedFor(r); ok {
			r = r.WithContext(r.Context()) // a shallow copy
			r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedFor returns the client address a forwarding member recorded in
// r, when r's peer is one.
func (s *Server) forwardedFor(r *http.Request) (netip.Addr, bool) {
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		return netip.Addr{}, false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !s.cfg.Forwarder(peer.Addr().Unmap()) {
		return netip.Addr{}, false
	}
	entries := strings.Split(xff[len(xff)-1], ",")
	client, err := netip.ParseAddr(strings.TrimSpace(entries[len(entries)-1]))
	if err != nil {
		return netip.Addr{}, false
	}
	return client.Unmap().WithZone(""), true
}

// refuseBlocked answers 429 when the request's address has failed
// authentication (a token, or a join secret) too often, and returns the
// address.
func (s *Server) refuseBlocked(w http.ResponseWriter, r *http.Request) (addr string, blocked bool) {
	addr = httprate.CanonicalizeIP(middleware.GetClientIP(r.Context()))
	if !s.authBlocked(addr) {
		return addr, false
	}
	w.Header().Set("Retry-After", "60")
	writeError(w, &api.Error{StatusCode: http.StatusTooManyRequests, Code: api.CodeRateLimited,
		Message: "too many failed authentication attempts from this address; try again in a minute"})
	return addr, true
}

// authBlocked reports whether addr has failed authentication too often.
func (s *Server) authBlocked(addr string) bool {
	if s.authFailures == nil {
		return false
	}
	_, rate, err := s.authFailures.Status(addr)
	return err == nil && rate >= float64(s.cfg.AuthFailureLimit)
}

// headerSink is a ResponseWriter that drops everything: counting a failed
// attempt must not add rate-limit headers to the 401.
type headerSink struct{}

func (headerSink) Header() http.Header         { return http.Header{} }
func (headerSink) Write(b []byte) (int, error) { return len(b), nil }
func (headerSink) WriteHeader(int)             {}

func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := ""
		if rc := chi.RouteContext(r.Context()); rc != nil {
			route = rc.RoutePattern()
		}
		metrics.APIRequest(r.Method, route, ww.Status(), time.Since(start))
		ev := s.cfg.Logger.Debug()
		heartbeat := r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1alpha1/nodes/") && strings.HasSuffix(r.URL.Path, "/status")
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !heartbeat {
			ev = s.cfg.Logger.Info() // writes; heartbeats, every node's every tick, only at debug
		}
		if ww.Status() >= 500 {
			ev = s.cfg.Logger.Error()
		}
		ev.Str("method", r.Method).Str("path", r.URL.Path).Int("status", ww.Status()).
			Str("remote", middleware.GetClientIP(r.Context())).Dur("duration", time.Since(start)).
			Msg("api request")
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.cfg.Repo.ClusterInfo(ctx); err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal, Message: "state store unavailable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
