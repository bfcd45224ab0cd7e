package haproxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
)

// proxy is a real HAProxy on loopback with the configuration Render makes.
type proxy struct {
	t    testing.TB
	dir  string
	port int
	// httpsPort serves HTTPS (tls_integration_test.go).
	httpsPort int
	client    Client
}

// startProxy runs haproxy on loopback in a run directory of its own,
// started with routes (RunFiles).
func startProxy(t testing.TB, routes ...api.IngressRoutes) *proxy {
	t.Helper()
	bin := testenv.HAProxyBinary(t)
	dir := t.TempDir()
	p := &proxy{t: t, dir: dir, port: testenv.FreePort(t), httpsPort: testenv.FreePort(t), client: Client{Socket: filepath.Join(dir, AdminSock)}}
	files, err := RunFiles(Config{Dir: dir, HTTPPort: p.port, HTTPSPort: p.httpsPort}, DesiredOf(routes))
	if err != nil {
		t.Fatal(err)
	}
	files[ConfigFile] = testenv.LoopbackBinds(files[ConfigFile], p.port, p.httpsPort)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(testenv.StartHAProxy(t, bin, filepath.Join(dir, ConfigFile), filepath.Join(dir, MasterSock)))
	polltest.Until(t, 10*time.Second, "haproxy's admin socket answers", func() bool {
		_, err := p.client.Run(context.Background(), "show info")
		return err == nil
	})
	return p
}

// apply brings the proxy to routes and fails the test on any error.
func (p *proxy) apply(routes ...api.IngressRoutes) {
	p.t.Helper()
	ctx := context.Background()
	o, err := p.client.Observe(ctx, p.dir)
	if err != nil {
		p.t.Fatal(err)
	}
	cmds, err := Plan(DesiredOf(routes), o, p.dir, DefaultSlots)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.client.Exec(ctx, cmds); err != nil {
		p.t.Fatal(err)
	}
}

// get fetches path with the Host header host and returns "status body".
func (p *proxy) get(host, path string) string {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.port, path), nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// backend is a loopback HTTP server answering its name.
func backend(t testing.TB, name string, hits *atomic.Int64) netip.AddrPort {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		fmt.Fprintln(w, name)
	}))
	t.Cleanup(s.Close)
	return netip.MustParseAddrPort(strings.TrimPrefix(s.URL, "http://"))
}

func routes(ns, wl string, rules ...api.IngressRule) api.IngressRoutes {
	return api.IngressRoutes{Namespace: ns, Workload: wl, Rules: rules}
}

func rule(host, path string, port int, backends ...api.IngressBackend) api.IngressRule {
	return api.IngressRule{Host: host, Path: path, Port: port, Backends: backends}
}

// TestHAProxyRoutes runs the real haproxy: routes by host, exact and
// prefix path, wildcard host; a moved route, a removed backend and a
// removed route take effect at run time; a restarted agent (a fresh
// Observe) plans nothing more; an untouched route keeps answering all the
// while; the admin socket is reached beyond sun_path's length.
func TestHAProxyRoutes(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	a1, a2 := backend(t, "a1", nil), backend(t, "a2", nil)
	api1, b1 := backend(t, "api1", nil), backend(t, "b1", nil)
	be := func(id string, ap netip.AddrPort) api.IngressBackend {
		return api.IngressBackend{InstanceID: id, Addr: ap}
	}
	web := routes("default", "web", rule("a.test", "/", 80, be("web-1", a1), be("web-2", a2)))
	apis := routes("default", "api", rule("a.test", "/api", 81, be("api-1", api1)))
	shop := routes("shop", "b", rule("*.b.test", "/", 82, be("b-1", b1)))
	p.apply(web, apis, shop)

	for _, tc := range []struct{ host, path, want string }{
		{"a.test", "/api", "200 api1"},
		{"a.test", "/api/v1/x", "200 api1"},
		{"A.TEST:80", "/api/", "200 api1"},
		{"a.test", "/apix", "200 a"}, // not under /api: falls to /
		{"x.b.test", "/anything", "200 b1"},
		{"b.test", "/", "404 no ingress route for this host and path"},
		{"c.test", "/", "404 no ingress route for this host and path"},
	} {
		if got := p.get(tc.host, tc.path); !strings.HasPrefix(got, tc.want) {
			t.Errorf("GET %s%s = %q, want %q", tc.host, tc.path, got, tc.want)
		}
	}
	seen := map[string]bool{}
	for range 6 {
		seen[p.get("a.test", "/")] = true
	}
	if !seen["200 a1"] || !seen["200 a2"] {
		t.Errorf("a.test/ answered %v, want both backends", seen)
	}

	// A restarted agent observes what it applied: nothing to do.
	o, err := p.client.Observe(context.Background(), p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, err := Plan(DesiredOf([]api.IngressRoutes{web, apis, shop}), o, p.dir, DefaultSlots); err != nil || len(cmds) != 0 {
		t.Fatalf("second plan = %q, %v; want nothing to do", cmds, err)
	}

	// A stream on a.test/ while /api moves to b1, then goes; web-2 goes.
	var failures, requests atomic.Int64
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			requests.Add(1)
			if got := p.get("a.test", "/"); got != "200 a1" && got != "200 a2" {
				failures.Add(1)
			}
		}
	}()
	apis.Rules[0].Backends = []api.IngressBackend{be("api-2", b1)}
	p.apply(web, apis, shop)
	polltest.Until(t, 5*time.Second, "a.test/api routed to api-2 (b1)", func() bool { return p.get("a.test", "/api") == "200 b1" })
	p.apply(web, shop)
	polltest.Until(t, 5*time.Second, "a.test/api falls to /", func() bool { return strings.HasPrefix(p.get("a.test", "/api"), "200 a") })
	web.Rules[0].Backends = web.Rules[0].Backends[:1]
	p.apply(web, shop)
	for range 4 {
		if got := p.get("a.test", "/"); got != "200 a1" {
			t.Errorf("after web-2 left, a.test/ = %q, want a1 only", got)
		}
	}
	stop()
	<-done
	if failures.Load() != 0 {
		t.Errorf("%d of %d requests to a.test/ failed while other routes changed", failures.Load(), requests.Load())
	}
	t.Logf("%d requests to a.test/ while other routes changed, %d failed", requests.Load(), failures.Load())

	p.apply(shop)
	if got := p.get("a.test", "/"); !strings.HasPrefix(got, "404") {
		t.Errorf("after web's routes went, a.test/ = %q, want 404", got)
	}
}

// TestHAProxyStartsWithItsRoutes: a proxy started from run files written
// for routes routes its first request, before anything reached its admin
// socket, and an updater then finds nothing to change.
func TestHAProxyStartsWithItsRoutes(t *testing.T) {
	t.Parallel()
	a1, b1 := backend(t, "a1", nil), backend(t, "b1", nil)
	web := routes("default", "web", rule("a.test", "/", 80, api.IngressBackend{InstanceID: "web-1", Addr: a1}))
	apis := routes("default", "api", rule("a.test", "/api", 81, api.IngressBackend{InstanceID: "api-1", Addr: b1}))
	p := startProxy(t, web, apis)
	for _, tc := range []struct{ host, path, want string }{
		{"a.test", "/", "200 a1"},
		{"a.test", "/api/x", "200 b1"},
		{"c.test", "/", "404 no ingress route for this host and path"},
	} {
		if got := p.get(tc.host, tc.path); got != tc.want {
			t.Errorf("GET %s%s = %q, want %q", tc.host, tc.path, got, tc.want)
		}
	}
	o, err := p.client.Observe(context.Background(), p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if cmds, err := Plan(DesiredOf([]api.IngressRoutes{web, apis}), o, p.dir, o.Slots); err != nil || len(cmds) != 0 {
		t.Errorf("plan for the routes it started with = %q, %v; want nothing to do", cmds, err)
	}
}

// TestHAProxyLongSocketPath: the admin socket of a run directory deeper
// than sun_path allows is reached through /proc/self/fd.
func TestHAProxyLongSocketPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, AdminSock)
	short := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", short)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Rename(short, sock); err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		_, _ = c.Write([]byte("got " + string(buf[:n])))
	}()
	out, err := Client{Socket: sock}.Run(context.Background(), "show info")
	if err != nil || out != "got show info\n" {
		t.Fatalf("Run over a %d-byte path = %q, %v", len(sock), out, err)
	}
}

// TestHAProxyRollingUpdate replaces every backend of a route one by one,
// as a rollout does (the new instance added, then the old one unrouted
// and only then stopped), under a constant stream of requests on new
// connections that are never retried: none fails.
func TestHAProxyRollingUpdate(t *testing.T) {
	t.Parallel()
	p := startProxy(t)
	type inst struct {
		id  string
		srv *httptest.Server
	}
	start := func(id string) inst {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, id) }))
		t.Cleanup(s.Close)
		return inst{id, s}
	}
	routesOf := func(insts ...inst) api.IngressRoutes {
		var bs []api.IngressBackend
		for _, in := range insts {
			bs = append(bs, api.IngressBackend{InstanceID: in.id, Addr: netip.MustParseAddrPort(strings.TrimPrefix(in.srv.URL, "http://"))})
		}
		return routes("d", "web", rule("a.test", "/", 80, bs...))
	}
	live := []inst{start("web-1"), start("web-2")}
	p.apply(routesOf(live...))
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 3 * time.Second}
	var requests, failures atomic.Int64
	var lastErr atomic.Value
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			requests.Add(1)
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", p.port), nil)
			req.Host = "a.test"
			resp, err := client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				failures.Add(1)
				lastErr.Store(err.Error())
			}
		}
	}()
	// Each step waits for 30 more requests, so every change happens under
	// the stream.
	progress := func(what string) {
		n := requests.Load() + 30
		polltest.Until(t, 10*time.Second, what, func() bool { return requests.Load() >= n })
	}
	for i := 3; i <= 6; i++ {
		progress("30 requests before the next step")
		fresh := start(fmt.Sprintf("web-%d", i))
		p.apply(routesOf(append(live, fresh)...)) // the new instance is ready: routed
		progress("30 requests with the new instance routed")
		old := live[0]
		live = append(live[1:], fresh)
		p.apply(routesOf(live...)) // the old one leaves: unrouted first
		progress("30 requests with the old instance unrouted")
		old.srv.Close() // then stopped
	}
	progress("30 requests after the update")
	stop()
	<-done
	t.Logf("rolling update of 4 instances under %d requests (a connection each, no retry): %d failed", requests.Load(), failures.Load())
	if failures.Load() != 0 {
		t.Errorf("%d of %d requests failed during the rolling update; last: %v", failures.Load(), requests.Load(), lastErr.Load())
	}
}
