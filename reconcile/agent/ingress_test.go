package agent

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestPrepareIngressProxy: a proxy instance gets its run directory (0777,
// under a 0700 ingress directory) with a configuration serving the port
// named http and empty maps, mounted at /run/kat-ingress, and may bind
// ports below 1024; an agent without an ingress directory refuses it.
func TestPrepareIngressProxy(t *testing.T) {
	q := proxyQuadlet(t)
	dir := filepath.Join(t.TempDir(), "ingress")
	ag := &Agent{cfg: AgentConfig{IngressDir: dir}}
	run := filepath.Join(dir, "run")
	// A previous proxy's sockets are left behind in the run directory.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(run, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{haproxy.AdminSock, haproxy.MasterSock} {
		if err := os.WriteFile(filepath.Join(run, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var spec runtime.ContainerSpec
	if err := ag.prepareIngressProxy(q, &spec); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{haproxy.AdminSock, haproxy.MasterSock} {
		if _, err := os.Stat(filepath.Join(run, name)); err == nil {
			t.Errorf("the previous proxy's %s is still there: it would pass the health check", name)
		}
	}
	for path, mode := range map[string]os.FileMode{dir: 0o700, run: 0o777} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want mode %o", path, fi.Mode(), err, mode)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(run, haproxy.ConfigFile))
	if err != nil || !strings.Contains(string(cfg), "bind :8080\n") {
		t.Errorf("haproxy.cfg binds no :8080 (%v):\n%s", err, cfg)
	}
	for _, m := range []string{haproxy.ExactMap, haproxy.PrefixMap} {
		if b, err := os.ReadFile(filepath.Join(run, m)); err != nil || len(b) != 0 {
			t.Errorf("%s: %q, %v; want empty", m, b, err)
		}
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0] != (runtime.Mount{Source: run, Target: haproxy.RunDir}) {
		t.Errorf("mounts %+v", spec.Mounts)
	}
	if spec.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Errorf("sysctls %v", spec.Sysctls)
	}
	if err := (&Agent{}).prepareIngressProxy(q, &spec); err == nil {
		t.Error("an agent without an ingress directory prepared a proxy")
	}
}

// TestPrepareIngressProxyWithRoutes: the run directory of a proxy the
// agent starts holds the routes its ingress updater knows (map entries and
// the pool's servers), so the proxy routes from its first request on.
func TestPrepareIngressProxyWithRoutes(t *testing.T) {
	repo := resources.New(storetest.New(t))
	if _, err := repo.WriteIngressRoutes(t.Context(), []api.IngressRoutes{{Namespace: "d", Workload: "w", Rules: []api.IngressRule{{
		Host: "w.test", Path: "/", Port: 80, Backends: []api.IngressBackend{{InstanceID: "w-1", Addr: netip.MustParseAddrPort("10.1.0.5:80")}},
	}}}}, nil); err != nil {
		t.Fatal(err)
	}
	ag := &Agent{cfg: AgentConfig{IngressDir: filepath.Join(t.TempDir(), "ingress"), Repo: repo}}
	ag.ingress = newIngressUpdater(ag)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ag.ingress.routes.Run(ctx, func(string) {})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ag.ingress.routes.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the routes cache did not sync")
	}
	var spec runtime.ContainerSpec
	if err := ag.prepareIngressProxy(proxyQuadlet(t), &spec); err != nil {
		t.Fatal(err)
	}
	run := ag.ingressRunDir()
	slot := haproxy.SlotName(0)
	if b, err := os.ReadFile(filepath.Join(run, haproxy.PrefixMap)); err != nil || string(b) != "w.test/ "+slot+"\n" {
		t.Errorf("%s: %q, %v; want w.test/ routed to %s", haproxy.PrefixMap, b, err, slot)
	}
	cfg, err := os.ReadFile(filepath.Join(run, haproxy.ConfigFile))
	if err != nil || !strings.Contains(string(cfg), "backend "+slot+"\n    balance roundrobin\n    server w-1 10.1.0.5:80 ") {
		t.Errorf("haproxy.cfg has no server w-1 in %s (%v):\n%s", slot, err, cfg)
	}
}

// proxyQuadlet is an ingress proxy workload serving HTTP on 8080.
func proxyQuadlet(t *testing.T) *quadlet.Quadlet {
	t.Helper()
	files := map[string][]byte{
		"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: ingress, namespace: kat-core, labels: {kat.dws.rip/ingress-proxy: haproxy}}
spec:
  type: DaemonService
  source: {image: "docker.io/library/haproxy:2.6"}
  restartPolicy: {condition: Always}
  container: {name: haproxy}
`),
		"VirtualLoadBalancer.kat": []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: VirtualLoadBalancer\nspec:\n  ports:\n    - {name: http, containerPort: 8080}\n"),
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isIngressProxy(q) {
		t.Fatal("the labelled workload is not a proxy")
	}
	return q
}
