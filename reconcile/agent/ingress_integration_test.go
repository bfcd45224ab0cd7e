package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store/resources"
)

// TestIngressUpdaterAppliesRoutes runs the agent's updater against a real
// etcd and a real haproxy on loopback (no container): routes the leader
// writes are served within a pass of their write, a deleted record's route
// goes, and a restarted haproxy (empty state) is filled again without any
// change of the routes.
func TestIngressUpdaterAppliesRoutes(t *testing.T) {
	f := newIngressFixture(t)
	repo, u := f.repo, f.u
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "web") }))
	defer web.Close()

	get := func() string { return f.get("a.test") }
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

	f.stop()
	f.stop = f.startHAProxy()
	restarted := time.Now()
	polltest.Until(t, 10*time.Second, "a restarted haproxy serves a.test again", func() bool { return get() == "200 web" })
	t.Logf("haproxy restarted -> a.test served again: %s (sync every %s)", time.Since(restarted).Round(time.Millisecond), ingressSync)

	if _, err := repo.WriteIngressRoutes(context.Background(), nil, []string{resources.IngressRoutesKey("d", "web")}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a.test unrouted", func() bool { return strings.HasPrefix(get(), "404 ") })
}
