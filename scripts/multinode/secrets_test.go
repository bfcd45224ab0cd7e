package multinode

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
)

// TestSecrets: a secret sealed with katcall and committed to the config
// repository reaches a container on a worker as an environment variable and
// as a file; the plaintext is nowhere else (data directories, Podman's
// files, etcd, logs, katcall's output); the other worker cannot read it; a
// new value pushed reaches a file-only consumer in place (same container)
// and the variable through a rolling update. Reports both delays. The
// variable's consumer names no command: its image's entrypoint runs.
func TestSecrets(t *testing.T) {
	requirePrereqs(t)
	t.Parallel()
	hooks := newHookRepos(t)
	c := startCluster(t, clusterSpec{name: "sec", hosts: 3, hooks: hooks})
	consumer, other := c.Hosts[1], c.Hosts[2]
	sentinel := func() string {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return "SENTINEL-" + hex.EncodeToString(b)
	}
	v1, v2 := sentinel(), sentinel()
	recipient := strings.TrimSpace(c.katcall(t, "secret", "recipient"))

	seal := func(value string) {
		t.Helper()
		plain := filepath.Join(t.TempDir(), "db.yaml")
		if err := os.WriteFile(plain, []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata: {name: db, namespace: default}\nstringData: {password: \""+value+"\"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(hooks.config.work, "default", "secrets", "db.sops.yaml")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		c.katcall(t, "secret", "seal", "-f", plain, "-o", out, "--cluster-recipient", recipient)
	}
	seal(v1)
	app := filepath.Join(hooks.config.work, "default", "app", "workload.kat")
	if err := os.MkdirAll(filepath.Dir(app), 0o755); err != nil {
		t.Fatal(err)
	}
	// The consumer's image has an entrypoint and a cmd, and the workload
	// no command: the wrapper that sets the variable runs the image's.
	for _, args := range [][]string{{"create", "--name", "kat-entry", "localhost/kat-base:latest"},
		{"commit", "--quiet", "--change", `ENTRYPOINT ["/bin/sh", "-c"]`, "--change", `CMD ["exec sleep 100000"]`, "kat-entry", "localhost/kat-entry:latest"},
		{"rm", "kat-entry"}} {
		if out, err := consumer.Command(t.Context(), "podman", append(consumer.PodmanArgs(), args...)...).CombinedOutput(); err != nil {
			t.Fatalf("podman %v on %s: %v: %s", args, consumer.Name, err, out)
		}
	}
	// The container prints nothing of the value: its log is on disk.
	if err := os.WriteFile(app, []byte(strings.ReplaceAll(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: default}
spec:
  type: Service
  replicas: 1
  source: {image: "localhost/kat-entry:latest"}
  restartPolicy: {condition: Always}
  nodeSelector: {kat.harness/host: HOST}
  container:
    stopGracePeriodSeconds: 0
    env:
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}
    volumeMounts: [{name: db, mountPath: /run/secrets/db}]
  volumes: [{name: db, secret: {secretName: db}}]
`, "HOST", consumer.Name)), 0o644); err != nil {
		t.Fatal(err)
	}
	commit := func(msg string) {
		t.Helper()
		for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", msg}, {"push", "-q", "origin", "HEAD:main"}} {
			if err := hooks.config.git(args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A second consumer mounts the secret only: it never rolls.
	files := filepath.Join(hooks.config.work, "default", "files", "workload.kat")
	if err := os.MkdirAll(filepath.Dir(files), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files, []byte(strings.ReplaceAll(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: files, namespace: default}
spec:
  type: Service
  replicas: 1
  source: {image: "localhost/kat-base:latest"}
  restartPolicy: {condition: Always}
  nodeSelector: {kat.harness/host: HOST}
  container:
    command: ["/bin/sh", "-c", "exec sleep 100000"]
    stopGracePeriodSeconds: 0
    volumeMounts: [{name: db, mountPath: /run/secrets/db}]
  volumes: [{name: db, secret: {secretName: db}}]
`, "HOST", consumer.Name)), 0o644); err != nil {
		t.Fatal(err)
	}
	commit("db secret and its consumers")

	read := func(id string) (env, file string, err error) {
		if env, err = podmanExec(t.Context(), consumer, id, "cat", "/proc/1/environ"); err != nil {
			return "", "", err
		}
		file, err = podmanExec(t.Context(), consumer, id, "cat", "/run/secrets/db/password")
		return env, file, err
	}
	has := func(env, file, value string) bool {
		return strings.Contains(env, "DB_PASSWORD="+value+"\x00") && file == value
	}
	var id string
	polltest.UntilErr(t, 3*time.Minute, "the consumer on "+consumer.Name+" with the secret", func() error {
		ids, err := consumer.Containers(t.Context(), "label=kat.workload=app", "status=running")
		if err != nil {
			return err
		}
		if len(ids) != 1 {
			return fmt.Errorf("running: %v", ids)
		}
		env, file, err := read(ids[0])
		if err != nil {
			return err
		}
		if !has(env, file, v1) {
			return fmt.Errorf("the container lacks the value (env %t, file %t)", strings.Contains(env, v1), file == v1)
		}
		cmdline, err := podmanExec(t.Context(), consumer, ids[0], "cat", "/proc/1/cmdline")
		if err != nil {
			return fmt.Errorf("read PID 1's command line: %w", err)
		}
		if cmdline != "sleep\x00100000\x00" {
			return fmt.Errorf("PID 1 is %q, want the image's entrypoint and cmd", cmdline)
		}
		id = ids[0]
		return nil
	})

	// The other worker: not through the API with its certificate, nor the
	// admin token through the node route; not in etcd with its user.
	workerClient := func(cert pki.Paths) *apiclient.Client {
		leaf := &pki.Leaf{}
		var err error
		if leaf.CertPEM, err = os.ReadFile(cert.Cert); err != nil {
			t.Fatal(err)
		}
		if leaf.KeyPEM, err = os.ReadFile(cert.Key); err != nil {
			t.Fatal(err)
		}
		caPEM, err := os.ReadFile(filepath.Join(c.Hosts[0].DataDir, "pki", "ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := apiclient.New(apiclient.Config{Server: apiURL(c.Hosts[0], ""), CAData: caPEM, ClientCert: leaf})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	w2 := workerClient(pki.PathsIn(filepath.Join(other.DataDir, "pki"), "node"))
	for _, node := range []string{other.Name, consumer.Name} {
		if _, err := w2.GetNodeSecret(t.Context(), node, "default", "db"); statusOf(err) != http.StatusForbidden {
			t.Errorf("%s asks for %s's secret: %v, want 403", other.Name, node, err)
		}
	}
	if out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "secrets", "-o", "json"); err != nil || !strings.Contains(out, `"version": 1`) {
		t.Errorf("katcall get secrets: %s, %v", out, err)
	}
	workerEtcd := leaderEtcd(t, c.Cluster, certTLS(t, other, "node"))
	for _, key := range []string{"/kat/secrets/", "/kat/secrets/default/db"} {
		if _, err := workerEtcd.Get(t.Context(), key, clientv3.WithPrefix()); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s reads %s in etcd: %v, want permission denied", other.Name, key, err)
		}
	}

	filesID := containerOf(t, consumer, "files")
	// Rotation: the file in place at once, the variable by a new instance.
	seal(v2)
	pushed := time.Now()
	commit("rotate db")
	var fileAt, envAt time.Duration
	polltest.UntilErr(t, 3*time.Minute, "the new value in the consumer", func() error {
		if fileAt == 0 {
			if f, err := podmanExec(t.Context(), consumer, filesID, "cat", "/run/secrets/db/password"); err == nil && f == v2 {
				fileAt = time.Since(pushed)
			}
		}
		ids, err := consumer.Containers(t.Context(), "label=kat.workload=app", "status=running")
		if err != nil {
			return err
		}
		for _, nid := range ids {
			if nid == id {
				continue
			}
			if env, file, err := read(nid); err == nil && has(env, file, v2) && envAt == 0 {
				envAt = time.Since(pushed)
			}
		}
		if fileAt == 0 || envAt == 0 {
			return fmt.Errorf("file updated after %v, env consumer after %v", fileAt, envAt)
		}
		return nil
	})
	t.Logf("push to file updated in place: %v; push to a consumer running with the new variable: %v", fileAt.Round(time.Millisecond), envAt.Round(time.Millisecond))
	if ids, err := consumer.Containers(t.Context(), "label=kat.workload=files", "status=running"); err != nil || len(ids) != 1 || ids[0] != filesID {
		t.Errorf("the file consumer was replaced (%v, %v): its files should change in place", ids, err)
	}
	// Each consumer's running instance reports version 2; the secret names
	// both consumers.
	polltest.UntilErr(t, time.Minute, "secretVersions db 2 in both consumers' status", func() error {
		for _, w := range []string{"default/files", "default/app"} {
			out, err := c.Katcall(t.Context(), c.bin.Katcall, "status", w, "-o", "json")
			if err != nil {
				return err
			}
			var d api.WorkloadDetail
			if err := json.Unmarshal([]byte(out), &d); err != nil {
				return fmt.Errorf("status %s: %w", w, err)
			}
			if !slices.ContainsFunc(d.Instances, func(in api.Instance) bool {
				return in.Status.Phase == api.InstanceRunning && in.Status.SecretVersions["db"] == 2
			}) {
				return fmt.Errorf("%s: no running instance holds db version 2: %+v", w, d.Instances)
			}
		}
		return nil
	})
	if out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "secrets"); err != nil || !strings.Contains(out, "app,files") {
		t.Errorf("katcall get secrets: %s, %v; want USED-BY app,files", out, err)
	}

	// The plaintext is nowhere else: hosts' directories (data, Podman's
	// root, run root, logs) but the consumer's secrets tmpfs, etcd, and
	// katcall's output.
	for _, h := range c.Hosts {
		out, _ := exec.Command("grep", "-r", "-a", "-l", "-F", "--exclude-dir=secrets", "-e", v1, "-e", v2, h.Dir).Output()
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("the plaintext is in %s's files:\n%s", h.Name, s)
		}
	}
	kvs, err := rootEtcd(t, c.Cluster).Get(t.Context(), "/kat/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs.Kvs {
		if strings.Contains(string(kv.Value), v1) || strings.Contains(string(kv.Value), v2) {
			t.Errorf("etcd key %s holds the plaintext", kv.Key)
		}
	}
	for _, args := range [][]string{{"get", "secrets", "-o", "json"}, {"get", "secrets"}, {"get", "events", "-o", "json"}, {"get", "audit", "-o", "json"},
		{"get", "sources", "-o", "json"}, {"get", "workloads", "-o", "json"}, {"status", "default/app"}, {"status", "default/app", "-o", "json"},
		{"status", "default/files", "-o", "json"}} {
		out, _ := c.Katcall(t.Context(), c.bin.Katcall, args...)
		if strings.Contains(out, v1) || strings.Contains(out, v2) {
			t.Errorf("katcall %v prints the plaintext", args)
		}
	}
	// Nor the leader's metrics, which counted the decrypts and deliveries.
	caPEM := readHostFile(t, c.Hosts[0], filepath.Join("pki", "ca.crt"))
	m, err := scrape(t, memberHTTP(t, caPEM), c.Hosts[0], strings.TrimSpace(string(readHostFile(t, c.Hosts[0], "admin.token"))))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m, v1) || strings.Contains(m, v2) || !strings.Contains(m, `kat_secret_deliveries_total{result="delivered"}`) ||
		!strings.Contains(m, `kat_secret_decrypts_total{result="success",via="git"}`) {
		t.Errorf("the leader's /metrics hold the plaintext or lack the secret counters")
	}
}

// statusOf is the HTTP status of an API error, 0 for another error.
func statusOf(err error) int {
	var e *api.Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
