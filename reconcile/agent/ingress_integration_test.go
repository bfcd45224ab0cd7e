package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestIngressUpdaterAppliesRoutes runs the agent's updater against a real
// etcd and a real haproxy on loopback (no container): routes the leader
// writes are served within a pass of their write, a deleted record's route
// goes, and a restarted haproxy (empty state) is filled again without any
// change of the routes.
func TestIngressUpdaterAppliesRoutes(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		testenv.SkipOrFail(t, "haproxy is not installed (apt-get install haproxy)")
	}
	repo := resources.New(storetest.New(t))
	ingressDir := filepath.Join(t.TempDir(), "ingress")
	ag := &Agent{cfg: AgentConfig{Repo: repo, IngressDir: ingressDir, Now: time.Now, OnChange: func() {}}}
	run := ag.ingressRunDir()
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg, err := haproxy.Render(haproxy.Config{Dir: run, HTTPPort: port})
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), fmt.Sprintf("bind :%d", port), fmt.Sprintf("bind 127.0.0.1:%d", port), 1))
	for name, body := range map[string][]byte{haproxy.ConfigFile: cfg, haproxy.ExactMap: nil, haproxy.PrefixMap: nil} {
		if err := os.WriteFile(filepath.Join(run, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	startHAProxy := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		cmd := exec.CommandContext(ctx, bin, "-W", "-db", "-f", filepath.Join(run, haproxy.ConfigFile))
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return func() {
			cancel()
			_ = cmd.Wait()
			_ = os.Remove(filepath.Join(run, haproxy.AdminSock))
		}
	}
	stop := startHAProxy()
	t.Cleanup(func() { stop() })

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "web") }))
	defer web.Close()
	u := newIngressUpdater(ag)
	u.dir = run
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	get := func() string {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/", port), nil)
		req.Host = "a.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	routes := api.IngressRoutes{Namespace: "d", Workload: "web", Rules: []api.IngressRule{{
		Host: "a.test", Path: "/", PortName: "http", Port: 80,
		Backends: []api.IngressBackend{{InstanceID: "web-1", Addr: netip.MustParseAddrPort(strings.TrimPrefix(web.URL, "http://"))}},
	}}}
	written := time.Now()
	if _, err := repo.WriteIngressRoutes(context.Background(), []api.IngressRoutes{routes}, nil); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a.test served through haproxy", func() bool { return get() == "200 web" })
	t.Logf("routes written -> first 200 through haproxy: %s", time.Since(written).Round(time.Millisecond))
	if st := u.Status(); st == nil || st.Routes != 1 || st.Backends != 1 || st.LastError != "" {
		t.Errorf("status %+v, want 1 route, 1 backend, no error", st)
	}

	stop()
	stop = startHAProxy()
	restarted := time.Now()
	polltest.Until(t, 10*time.Second, "a restarted haproxy serves a.test again", func() bool { return get() == "200 web" })
	t.Logf("haproxy restarted -> a.test served again: %s (sync every %s)", time.Since(restarted).Round(time.Millisecond), ingressSync)

	if _, err := repo.WriteIngressRoutes(context.Background(), nil, []string{resources.IngressRoutesKey("d", "web")}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a.test unrouted", func() bool { return strings.HasPrefix(get(), "404 ") })
}
