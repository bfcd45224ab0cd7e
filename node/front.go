package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/store/resources"
)

// ForwardedByHeader names the member that forwarded a request to the
// leader. A node that does not lead answers a request carrying it with 503
// instead of forwarding it again, so that two nodes that each believe the
// other leads never pass a request back and forth.
const ForwardedByHeader = "Kat-Forwarded-By"

// leaderLookupTimeout bounds a forwarding member's read of the leader
// endpoint: without an etcd quorum the read never completes.
const leaderLookupTimeout = 3 * time.Second

// apiFront is the API listener of a node that may lead (the init node and
// etcd members). While the node leads it serves the leader's handler (lead);
// otherwise it forwards every request but a scrape of /metrics, which it
// answers itself, to the leader that etcd names, as a reverse proxy, so
// katcall, webhooks and agents may call any member.
type apiFront struct {
	n    *Node
	term atomic.Pointer[http.Handler]
	// tr reaches the leader's API: the cluster CA, and no client
	// certificate, so that a forwarded request carries no node's identity.
	tr *http.Transport
	// tr1 is tr speaking HTTP/1.1 only, for requests that upgrade the
	// connection (katcall exec): an upgrade has no HTTP/2 form.
	tr1 *http.Transport
	// metrics answers scrapes while the node does not lead, with the
	// API's authentication of them.
	metrics http.Handler
}

func newAPIFront(n *Node) (*apiFront, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: n.ca.Pool(), MinVersion: tls.VersionTLS12}
	// The node's admin token is the cluster's (Open checks it).
	srv, err := apiserver.New(apiserver.Config{Repo: n.repo, AdminTokenHash: resources.HashToken(n.admin),
		Metrics: metrics.Handler(), Logger: n.log.With().Str("component", "api").Logger()})
	if err != nil {
		return nil, fmt.Errorf("serve /metrics on the API port: %w", err)
	}
	return &apiFront{n: n, tr: tr, tr1: apiclient.HTTP1Only(tr), metrics: srv.MetricsHandler()}, nil
}

// run listens on the API port and serves until ctx ends.
func (f *apiFront) run(ctx context.Context) error {
	apiTLS, err := f.n.serverTLS(tls.VerifyClientCertIfGiven, tls.VersionTLS12, "api")
	if err != nil {
		return err
	}
	port := f.n.state.Cluster.Spec.APIPort
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("listen for the API on port %d: %w", port, err)
	}
	// Agents report with their node certificate; Git hosts' webhooks may
	// speak TLS 1.2 only.
	defer f.tr.CloseIdleConnections()
	defer f.tr1.CloseIdleConnections()
	g, gctx := errgroup.WithContext(ctx)
	// Requests in flight when the node stops see their context end (as
	// the leader's requests do when its term ends), so that shutting down
	// never waits on a forward or a handler that would outlast the grace.
	srv := &http.Server{Handler: f, TLSConfig: apiTLS.Config(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return gctx }}
	g.Go(func() error { return apiTLS.Run(gctx) })
	g.Go(func() error { return serveTLS(gctx, srv, ln, "API") })
	return g.Wait()
}

// lead serves h until lctx, the term of leadership, ends or release is
// called; requests in flight then have their contexts cancelled.
func (f *apiFront) lead(lctx context.Context, h http.Handler) (release func()) {
	var term http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer context.AfterFunc(lctx, cancel)()
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
	f.term.Store(&term)
	release = func() { f.term.CompareAndSwap(&term, nil) }
	context.AfterFunc(lctx, release)
	return release
}

func (f *apiFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := f.term.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if r.URL.Path == "/metrics" {
		// A scrape asks for this member's figures (its etcd member
		// status, its leadership), not the leader's.
		f.metrics.ServeHTTP(w, r)
		return
	}
	f.forward(w, r)
}

// forward passes r to the leader etcd names, or answers 503 saying why
// there is none.
func (f *apiFront) forward(w http.ResponseWriter, r *http.Request) {
	if by := r.Header.Get(ForwardedByHeader); by != "" {
		unavailable(w, fmt.Sprintf("node %s forwarded the request to %s, which does not lead (an election is under way): retry", by, f.n.state.NodeName))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), leaderLookupTimeout)
	ep, err := f.n.repo.GetLeaderEndpoint(ctx)
	cancel()
	switch {
	case err != nil && f.n.embed != nil && !f.n.embed.Status().HasLeader:
		unavailable(w, fmt.Sprintf("etcd quorum lost: member %s reaches no majority of the etcd members, so the cluster has no leader and refuses every write until enough members are back", f.n.state.NodeName))
		return
	case err != nil:
		unavailable(w, fmt.Sprintf("node %s cannot find the leader: %v", f.n.state.NodeName, err))
		return
	case ep.Node == f.n.state.NodeName:
		unavailable(w, fmt.Sprintf("no leader: node %s led last and an election is under way: retry", ep.Node))
		return
	}
	target, err := url.Parse(ep.APIURL)
	if err != nil {
		unavailable(w, fmt.Sprintf("the leader endpoint %q of node %s: %v", ep.APIURL, ep.Node, err))
		return
	}
	tr := f.tr
	if r.Header.Get("Upgrade") != "" {
		tr = f.tr1
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedByHeader, f.n.state.NodeName)
		},
		Transport:     tr,
		FlushInterval: -1, // logs and events stream
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeAPIError(w, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeUnavailable,
				Message: fmt.Sprintf("node %s forwarded the request to the leader %s at %s: %v", f.n.state.NodeName, ep.Node, ep.APIURL, err)})
		},
	}
	proxy.ServeHTTP(w, r)
}

func unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeAPIError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: msg})
}

func writeAPIError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.StatusCode)
	_ = json.NewEncoder(w).Encode(e)
}

var _ http.Handler = (*apiFront)(nil)
