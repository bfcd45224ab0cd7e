package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// ingressFixture is the agent's ingress updater against a real etcd and a
// real haproxy on loopback (no container), in the run directory the agent
// gives a proxy instance.
type ingressFixture struct {
	t    *testing.T
	bin  string
	repo *resources.Repo
	u    *ingressUpdater
	run  string
	port int
	// httpsPort serves HTTPS; 0 without.
	httpsPort int
	// stop stops the haproxy startHAProxy started last.
	stop func()
}

// newIngressFixture writes the proxy's configuration (bound to loopback),
// starts haproxy and the updater; both stop when t ends.
func newIngressFixture(t *testing.T) *ingressFixture {
	t.Helper()
	return newIngressFixtureWith(t, false, nil)
}

// newIngressFixtureWith is newIngressFixture serving HTTPS too (on
// httpsPort) when https, with configure changing the agent's configuration.
func newIngressFixtureWith(t *testing.T, https bool, configure func(*AgentConfig)) *ingressFixture {
	t.Helper()
	bin := testenv.HAProxyBinary(t)
	repo := resources.New(storetest.New(t))
	ag := &Agent{table: newInstanceTable(), cfg: AgentConfig{Repo: repo, Node: "n1", Facts: resources.NewNodeFacts(repo, nil),
		IngressDir: filepath.Join(t.TempDir(), "ingress"), Now: time.Now, OnChange: func() {}}}
	if configure != nil {
		configure(&ag.cfg)
	}
	f := &ingressFixture{t: t, bin: bin, repo: repo, run: ag.ingressRunDir()}
	if err := os.MkdirAll(f.run, 0o700); err != nil {
		t.Fatal(err)
	}
	f.port = testenv.FreePort(t)
	if https {
		f.httpsPort = testenv.FreePort(t)
	}
	files, err := haproxy.RunFiles(haproxy.Config{Dir: f.run, HTTPPort: f.port, HTTPSPort: f.httpsPort}, haproxy.Desired{})
	if err != nil {
		t.Fatal(err)
	}
	files[haproxy.ConfigFile] = testenv.LoopbackBinds(files[haproxy.ConfigFile], f.port, f.httpsPort)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(f.run, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.stop = f.startHAProxy()
	t.Cleanup(func() { f.stop() })

	f.u = newIngressUpdater(ag)
	f.u.dir = f.run
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.u.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f
}

// startHAProxy starts haproxy in the run directory, with its master socket
// there as the recipe's command has it, and returns how to stop it.
func (f *ingressFixture) startHAProxy() (stop func()) {
	haproxyStop := testenv.StartHAProxy(f.t, f.bin, filepath.Join(f.run, haproxy.ConfigFile), filepath.Join(f.run, haproxy.MasterSock))
	return func() {
		haproxyStop()
		_ = os.Remove(filepath.Join(f.run, haproxy.AdminSock))
	}
}

// get fetches / of host through the proxy: "status body" or the error.
func (f *ingressFixture) get(host string) string {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", f.port), nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

// TestIngressUpdaterGrowsThePool: 70 workloads with routes are more than
// the first pool's 64 backends: the updater grows it and routes them all.
// A reload the proxy refuses keeps it serving every route, and the error
// shows in the node's ingress status (katcall status) and as an event.
func TestIngressUpdaterGrowsThePool(t *testing.T) {
	f := newIngressFixture(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, r.Host) }))
	defer web.Close()
	addr := netip.MustParseAddrPort(strings.TrimPrefix(web.URL, "http://"))
	var records []api.IngressRoutes
	for i := range 70 {
		records = append(records, api.IngressRoutes{Namespace: "d", Workload: fmt.Sprintf("w%02d", i), Rules: []api.IngressRule{{
			Host: fmt.Sprintf("w%02d.test", i), Path: "/", Port: 80,
			Backends: []api.IngressBackend{{InstanceID: fmt.Sprintf("w%02d-1", i), Addr: addr}},
		}}})
	}
	metric := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, err := metrics.Value(name, labels)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	n1 := map[string]string{"node": "n1"}
	reloaded := map[string]string{"node": "n1", "result": "success"}
	reloadsBefore := metric("kat_ingress_reloads_total", reloaded)
	ctx := context.Background()
	if _, err := f.repo.WriteIngressRoutes(ctx, records, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, "w69.test served through haproxy", func() bool { return f.get("w69.test") == "200 w69.test" })
	for i := range 70 {
		if host := fmt.Sprintf("w%02d.test", i); f.get(host) != "200 "+host {
			t.Errorf("%s = %q", host, f.get(host))
		}
	}
	if st := f.u.Status(); st == nil || st.Routes != 70 || st.Backends != 70 || st.LastError != "" {
		t.Errorf("status %+v, want 70 routes and backends, no error", st)
	}
	if routes, reloads := metric("kat_ingress_routes", n1), metric("kat_ingress_reloads_total", reloaded)-reloadsBefore; routes != 70 || reloads != 1 {
		t.Errorf("kat_ingress_routes %v, kat_ingress_reloads_total{result=success} up by %v; want 70 and 1", routes, reloads)
	}
	failedBefore := metric("kat_ingress_apply_duration_seconds", map[string]string{"node": "n1", "result": "failure"})

	// Break the configuration file (as a bad template would), then ask for
	// a pool of 256: the reload fails, the proxy keeps serving.
	file := filepath.Join(f.run, haproxy.ConfigFile)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(strings.Replace(string(good), "global\n", "global\n    no-such-keyword\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 70; i < 130; i++ {
		records = append(records, api.IngressRoutes{Namespace: "d", Workload: fmt.Sprintf("w%03d", i), Rules: []api.IngressRule{{
			Host: fmt.Sprintf("w%03d.test", i), Path: "/", Port: 80,
			Backends: []api.IngressBackend{{InstanceID: fmt.Sprintf("w%03d-1", i), Addr: addr}},
		}}})
	}
	if _, err := f.repo.WriteIngressRoutes(ctx, records[70:], nil); err != nil {
		t.Fatal(err)
	}
	polltest.UntilErr(t, 20*time.Second, "the failed reload in the node's ingress status", func() error {
		if st := f.u.Status(); st == nil || !strings.Contains(st.LastError, "keeps serving the last good one") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	for _, host := range []string{"w00.test", "w69.test"} {
		if got := f.get(host); got != "200 "+host {
			t.Errorf("after a refused reload %s = %q, want it still served", host, got)
		}
	}
	if r := metric("kat_ingress_reloads_total", map[string]string{"node": "n1", "result": "failure"}); r < 1 {
		t.Errorf("kat_ingress_reloads_total{result=failure} = %v after a refused reload", r)
	}
	if failed := metric("kat_ingress_apply_duration_seconds", map[string]string{"node": "n1", "result": "failure"}); failed <= failedBefore {
		t.Errorf("apply failures %v after a refused reload, %v before: want more", failed, failedBefore)
	}
	evs, err := f.repo.ListEvents(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || e.Reason == api.ReasonIngressProxyError && e.Object == "node/n1" && strings.Contains(e.Message, "keeps serving the last good one")
	}
	if !found {
		t.Errorf("no %s event of node/n1 about the refused reload in %+v", api.ReasonIngressProxyError, evs)
	}
	t.Logf("status after the refused reload: %+v", f.u.Status())

	// Until the pool may try to grow again, every pass says why it did
	// not, beside the routes that do not fit.
	more := api.IngressRoutes{Namespace: "d", Workload: "w130", Rules: []api.IngressRule{{Host: "w130.test", Path: "/", Port: 80,
		Backends: []api.IngressBackend{{InstanceID: "w130-1", Addr: addr}}}}}
	if _, err := f.repo.WriteIngressRoutes(ctx, []api.IngressRoutes{more}, nil); err != nil {
		t.Fatal(err)
	}
	polltest.UntilErr(t, 20*time.Second, "a later pass that names both the refused reload and d/w130", func() error {
		if st := f.u.Status(); st == nil || !strings.Contains(st.LastError, "d/w130:80") || !strings.Contains(st.LastError, "keeps serving the last good one") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

// TestIngressUpdaterGrowsOnceTheMasterAnswers: a pool that must grow while
// nothing answers on the proxy's master socket (a proxy just started, its
// worker answering first) grows as soon as the master answers, not a
// minute later as after a reload the proxy refused.
func TestIngressUpdaterGrowsOnceTheMasterAnswers(t *testing.T) {
	f := newIngressFixture(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, r.Host) }))
	defer web.Close()
	addr := netip.MustParseAddrPort(strings.TrimPrefix(web.URL, "http://"))
	master := filepath.Join(f.run, haproxy.MasterSock)
	// The proxy has started once its master answers.
	polltest.Until(t, 10*time.Second, "the master socket answering", func() bool {
		_, err := haproxy.Client{Socket: master}.Run(context.Background(), "show proc; quit")
		return err == nil
	})
	away := master + ".away"
	if err := os.Rename(master, away); err != nil {
		t.Fatal(err)
	}
	var records []api.IngressRoutes
	for i := range 70 {
		records = append(records, api.IngressRoutes{Namespace: "d", Workload: fmt.Sprintf("w%02d", i), Rules: []api.IngressRule{{
			Host: fmt.Sprintf("w%02d.test", i), Path: "/", Port: 80,
			Backends: []api.IngressBackend{{InstanceID: fmt.Sprintf("w%02d-1", i), Addr: addr}},
		}}})
	}
	if _, err := f.repo.WriteIngressRoutes(context.Background(), records, nil); err != nil {
		t.Fatal(err)
	}
	polltest.UntilErr(t, 20*time.Second, "a grow that found no master", func() error {
		if st := f.u.Status(); st == nil || !strings.Contains(st.LastError, "master.sock") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if err := os.Rename(away, master); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, "w69.test served through haproxy", func() bool { return f.get("w69.test") == "200 w69.test" })
}

// TestIngressProxyReadyOnceRoutesLoad: a proxy that (re)starts answers
// before its routes are loaded; it counts as loaded (its instance ready,
// so a node-by-node update goes on to the next node) only once a pass
// brought it to the routes, and then it serves them.
func TestIngressProxyReadyOnceRoutesLoad(t *testing.T) {
	f := newIngressFixture(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, r.Host) }))
	defer web.Close()
	addr := netip.MustParseAddrPort(strings.TrimPrefix(web.URL, "http://"))
	if _, err := f.repo.WriteIngressRoutes(context.Background(), []api.IngressRoutes{{Namespace: "d", Workload: "w", Rules: []api.IngressRule{{
		Host: "w.test", Path: "/", Port: 80, Backends: []api.IngressBackend{{InstanceID: "w-1", Addr: addr}},
	}}}}, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, "w.test served through haproxy", func() bool { return f.get("w.test") == "200 w.test" })

	f.stop()
	restarted := time.Now()
	if f.u.loaded(restarted) {
		t.Fatal("a proxy started after the last pass counts as loaded")
	}
	f.stop = f.startHAProxy()
	polltest.Until(t, 20*time.Second, "the restarted proxy loaded", func() bool { return f.u.loaded(restarted) })
	if got := f.get("w.test"); got != "200 w.test" {
		t.Fatalf("w.test through the proxy once loaded = %q, want 200", got)
	}
}
