package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// ingressSync is how often the updater compares HAProxy's state with the
// routes without a change of them: a restarted proxy starts empty and is
// filled again within this.
const ingressSync = 2 * time.Second

// isIngressProxy reports whether q's instances are the cluster's ingress
// proxy (quadlet.LabelIngressProxy).
func isIngressProxy(q *quadlet.Quadlet) bool {
	return q.Workload.Metadata.Labels[quadlet.LabelIngressProxy] == quadlet.IngressProxyHAProxy
}

// ingressRunDir is the run directory of the node's proxy instance.
func (ag *Agent) ingressRunDir() string { return filepath.Join(ag.cfg.IngressDir, "run") }

// prepareIngressProxy readies the run directory of a proxy instance (its
// configuration and maps with the routes the updater knows now), mounts it
// into spec and lets a non-root proxy bind ports below 1024. The directory is
// 0777 so that the proxy, root of its own user namespace, creates its
// sockets there; its parent is 0700, so only host root reaches it.
func (ag *Agent) prepareIngressProxy(q *quadlet.Quadlet, spec *runtime.ContainerSpec) error {
	if ag.cfg.IngressDir == "" {
		return fmt.Errorf("%w: this agent runs no ingress proxy (it has no ingress directory)", runtime.ErrInvalidSpec)
	}
	var port, https int
	for _, p := range q.LoadBalancer.Spec.Ports {
		switch {
		case p.Name == "http" && p.Protocol == "TCP":
			port = p.ContainerPort
		case p.Name == "https" && p.Protocol == "TCP":
			https = p.ContainerPort
		}
	}
	var routes haproxy.Desired
	if ag.ingress != nil {
		routes = haproxy.DesiredOf(ag.ingress.routesNow())
	}
	files, err := haproxy.RunFiles(haproxy.Config{HTTPPort: port, HTTPSPort: https}, routes)
	if err != nil {
		return fmt.Errorf("%w: %w", runtime.ErrInvalidSpec, err)
	}
	run := ag.ingressRunDir()
	if err := os.MkdirAll(ag.cfg.IngressDir, 0o700); err != nil {
		return fmt.Errorf("make the ingress directory: %w", err)
	}
	if err := os.MkdirAll(run, 0o777); err != nil {
		return fmt.Errorf("make the ingress run directory: %w", err)
	}
	if err := os.Chmod(run, 0o777); err != nil { // umask
		return fmt.Errorf("make the ingress run directory: %w", err)
	}
	// Without HTTPS no crt-list: the updater then pushes no certificate.
	if err := os.Remove(filepath.Join(run, haproxy.CertList)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("clear the proxy's %s: %w", haproxy.CertList, err)
	}
	// The proxy starts with the routes known now, so that it does not
	// answer 404 until the updater reaches its admin socket; the updater
	// keeps them current from there.
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(run, name), body, 0o644); err != nil {
			return fmt.Errorf("write the proxy's %s: %w", name, err)
		}
	}
	// A previous proxy's sockets would pass the recipe's health check (the
	// admin socket is there) before this one listens.
	for _, name := range []string{haproxy.AdminSock, haproxy.MasterSock} {
		if err := os.Remove(filepath.Join(run, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the previous proxy's %s: %w", name, err)
		}
	}
	spec.Mounts = append(spec.Mounts, runtime.Mount{Source: run, Target: haproxy.RunDir})
	// The official image runs as the user haproxy: let it bind 80 in the
	// container's own network namespace (nothing changes on the host).
	if spec.Sysctls == nil {
		spec.Sysctls = map[string]string{}
	}
	spec.Sysctls["net.ipv4.ip_unprivileged_port_start"] = "0"
	return nil
}

// ingressUpdater applies the leader's routes to the node's ingress proxy
// over its admin socket (docs/architecture.md "Ingress"). It runs with the
// agent when the agent has an ingress directory, idle while no proxy
// socket answers there.
type ingressUpdater struct {
	ag     *Agent
	client haproxy.Client
	routes *store.Cache[api.IngressRoutes]
	// dir is the run directory as the proxy sees it (haproxy.RunDir):
	// the runtime API names maps by it.
	dir string

	log zerolog.Logger
	// growAfter is when a pool that failed to grow may be tried again.
	growAfter time.Time
	// growErr is why the pool last failed to grow, while it is still too
	// small: the passes until the next try report it beside the routes
	// that do not fit, so the status keeps the cause.
	growErr error
	// tls pushes the routes' certificates and the ACME answers.
	tls *ingressTLS
	// wake asks for a pass now: a proxy instance runs whose routes are
	// not loaded yet (loaded).
	wake chan struct{}

	mu     sync.Mutex
	status *api.IngressProxyStatus
	// loadedAt is when a pass last brought an answering proxy to the
	// routes; waiting is true while a running proxy instance waits for
	// that (its socket not there yet: the next pass comes soon).
	loadedAt time.Time
	waiting  bool
}

func newIngressUpdater(ag *Agent) *ingressUpdater {
	return &ingressUpdater{
		ag:     ag,
		log:    ag.cfg.Logger.With().Str("loop", "ingress").Logger(),
		tls:    newIngressTLS(ag),
		client: haproxy.Client{Socket: filepath.Join(ag.ingressRunDir(), haproxy.AdminSock)},
		dir:    haproxy.RunDir,
		wake:   make(chan struct{}, 1),
		routes: store.NewCache(ag.cfg.Repo.Store(), resources.IngressRoutesPrefix(), func(kv store.KV) (api.IngressRoutes, bool) {
			r, err := resources.DecodeIngressRoutes(kv)
			return r, err == nil
		}),
	}
}

// run applies the routes on every change of them (after 20 ms, so a
// burst is one pass) and every ingressSync, until ctx ends.
func (u *ingressUpdater) run(ctx context.Context) {
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := u.routes.Run(ctx, func(string) { reconcile.Poke(changed) }); err != nil && ctx.Err() == nil {
			u.log.Error().Err(err).Msg("watching the ingress routes stopped")
		}
	}()
	defer func() { <-done }()
	challengesDone := make(chan struct{})
	go func() {
		defer close(challengesDone)
		if err := u.tls.challenges.Run(ctx, func(string) { reconcile.Poke(changed) }); err != nil && ctx.Err() == nil {
			u.ag.cfg.Logger.Error().Err(err).Str("component", "ingress").Msg("watching the ACME challenges stopped")
		}
	}()
	defer func() { <-challengesDone }()
	for _, synced := range []<-chan struct{}{u.routes.Synced(), u.tls.challenges.Synced()} {
		select {
		case <-synced:
		case <-ctx.Done():
			return
		}
	}
	tick := time.NewTicker(ingressSync)
	defer tick.Stop()
	for {
		var soon <-chan time.Time
		if !u.once(ctx) {
			soon = time.After(ingressRetry) // a proxy restarting: fill it as soon as it answers
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-soon:
		case <-u.wake:
		case <-changed:
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			drain(changed)
		}
	}
}

// routesNow returns every ingress routes record the updater has seen
// (none before its first sync): what the proxy should route.
func (u *ingressUpdater) routesNow() []api.IngressRoutes {
	snap, _ := u.routes.Snapshot()
	routes := make([]api.IngressRoutes, 0, len(snap))
	for _, r := range snap {
		routes = append(routes, r)
	}
	return routes
}

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// ingressRetry is how soon the updater tries again when the proxy's
// socket is there but nothing answers on it (the proxy restarting).
const ingressRetry = 200 * time.Millisecond

// growRetry is how long the updater waits before it tries again to grow a
// pool that failed to grow (a reload HAProxy refused).
const growRetry = time.Minute

// once brings the proxy to the routes, when a proxy answers. It returns
// false when the proxy's socket is there but nothing answers on it, or
// is not there yet while a proxy instance runs.
func (u *ingressUpdater) once(ctx context.Context) bool {
	if _, err := os.Stat(u.client.Socket); err != nil {
		u.setStatus(nil)
		u.mu.Lock()
		defer u.mu.Unlock()
		return !u.waiting
	}
	routes := u.routesNow()
	desired := haproxy.DesiredOf(routes)
	servers := 0
	for _, s := range desired.Backends {
		servers += len(s)
	}
	start := time.Now()
	now := u.ag.cfg.Now()
	applied, err := haproxy.Sync(ctx, u.client, u.ag.ingressRunDir(), u.dir, desired, !now.Before(u.growAfter))
	if ctx.Err() != nil {
		return true
	}
	// A master socket nothing answers on (the proxy starting or
	// restarting) reloaded nothing: the next pass, soon, tries again. Only
	// a reload the proxy tried waits growRetry.
	unanswered := applied.GrowFailed && errors.Is(applied.GrowErr, haproxy.ErrUnreachable)
	if applied.GrowFailed && !unanswered {
		u.growAfter, u.growErr = now.Add(growRetry), applied.GrowErr
	}
	if applied.Slots >= haproxy.SlotsFor(len(desired.Backends)) {
		u.growErr = nil
	} else if !applied.GrowFailed && u.growErr != nil {
		err = errors.Join(u.growErr, err)
	}
	if applied.Grown || (applied.GrowFailed && !unanswered) {
		metrics.IngressReloaded(u.ag.cfg.Node, !applied.GrowFailed)
	}
	if applied.Commands > 0 || err != nil {
		metrics.IngressApplied(u.ag.cfg.Node, start, desired.Rules, servers, err)
	}
	var tlsApplied haproxy.TLSApplied
	if !errors.Is(err, haproxy.ErrUnreachable) && u.tls.enabled(u.ag.ingressRunDir()) {
		var tlsErr error
		tlsApplied, tlsErr = u.tls.apply(ctx, u, routes)
		err = errors.Join(err, tlsErr)
	}
	if err != nil {
		// also a proxy starting or stopping: next pass. What TLS did
		// apply still counts: an ACME challenge answered while another
		// host's certificate failed.
		u.fail(ctx, err, func(st *api.IngressProxyStatus) {
			st.Certificates, st.ACMETokens = tlsApplied.Certificates, strings.Join(tlsApplied.Tokens, " ")
		})
		return !errors.Is(err, haproxy.ErrUnreachable)
	}
	if applied.Commands > 0 {
		u.log.Info().Int("commands", applied.Commands).Int("routes", desired.Rules).Int("pool", applied.Slots).
			Bool("pool_grown", applied.Grown).Msg("ingress proxy updated")
	}
	st := &api.IngressProxyStatus{Proxy: "HAProxy", Routes: desired.Rules, Backends: servers,
		Certificates: tlsApplied.Certificates, ACMETokens: strings.Join(tlsApplied.Tokens, " ")}
	if prev := u.Status(); prev != nil && applied.Commands == 0 && tlsApplied.Commands == 0 {
		st.LastAppliedAt = prev.LastAppliedAt // a pass that changed nothing changes no status
	} else {
		st.LastAppliedAt = now.UTC().Truncate(time.Second)
	}
	u.mu.Lock()
	u.loadedAt = time.Now()
	waited := u.waiting
	u.mu.Unlock()
	u.setStatus(st)
	if waited {
		u.ag.notifyIfChanged() // a proxy instance turns ready (loaded)
	}
	return true
}

// loaded reports whether a pass brought the proxy to the routes after
// its container started at startedAt, and asks for a pass when not. Until
// then the proxy instance is not ready: it answers, but with no route, so
// an update that goes on to the next node once it is ready would leave no
// node serving.
func (u *ingressUpdater) loaded(startedAt time.Time) bool {
	u.mu.Lock()
	ok := !u.loadedAt.IsZero() && (startedAt.IsZero() || u.loadedAt.After(startedAt))
	u.waiting = !ok
	u.mu.Unlock()
	if !ok {
		reconcile.Poke(u.wake)
	}
	return ok
}

// fail records err as the proxy's last error, cut to 300 bytes, and an
// event when the error is new; updates bring in what the pass did apply.
func (u *ingressUpdater) fail(ctx context.Context, err error, updates ...func(*api.IngressProxyStatus)) {
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300]
	}
	msg = strings.ToValidUTF8(msg, "?")
	u.mu.Lock()
	st := api.IngressProxyStatus{Proxy: "HAProxy"}
	if u.status != nil {
		st = *u.status
	}
	st.LastError = msg
	for _, update := range updates {
		update(&st)
	}
	changed := u.status == nil || *u.status != st
	u.status = &st
	u.mu.Unlock()
	if !changed {
		return // logged when it began
	}
	u.log.Warn().Err(err).Msg("ingress proxy update failed; retrying")
	u.ag.cfg.OnChange()
	ev := api.NodeRef(u.ag.cfg.Node, "").Eventf(api.EventWarning, api.ReasonIngressProxyError, "ingress proxy on %s: %s", u.ag.cfg.Node, msg)
	if eerr := u.ag.cfg.Facts.AppendEvent(ctx, ev); eerr != nil && ctx.Err() == nil {
		u.log.Warn().Err(eerr).Msg("cannot record the ingress proxy's error event")
	}
}

// setStatus records st, and asks for a heartbeat when it differs.
func (u *ingressUpdater) setStatus(st *api.IngressProxyStatus) {
	u.mu.Lock()
	changed := (u.status == nil) != (st == nil) || st != nil && *st != *u.status
	u.status = st
	u.mu.Unlock()
	if changed {
		u.ag.cfg.OnChange()
	}
}

// Status is what the node's proxy applied last; nil without a proxy.
func (u *ingressUpdater) Status() *api.IngressProxyStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.status == nil {
		return nil
	}
	st := *u.status
	return &st
}
