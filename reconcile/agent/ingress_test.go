package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kat.dws.rip/kat/ingress/haproxy"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// TestPrepareIngressProxy: a proxy instance gets its run directory (0777,
// under a 0700 ingress directory) with a configuration serving the port
// named http and empty maps, mounted at /run/kat-ingress, and may bind
// ports below 1024; an agent without an ingress directory refuses it.
func TestPrepareIngressProxy(t *testing.T) {
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
