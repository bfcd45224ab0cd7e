package agent

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/agent/containerspec"
)

const agentSentinel = "agent-SENTINEL-4242"

// fixedSecrets is a SecretSource answering from a map, as the leader's API
// answers this node; set changes an answer while an agent runs.
type fixedSecrets struct {
	mu sync.Mutex
	m  map[string]*api.SecretDelivery
}

func newFixedSecrets(ds ...*api.SecretDelivery) *fixedSecrets {
	f := &fixedSecrets{m: map[string]*api.SecretDelivery{}}
	for _, d := range ds {
		f.set(d)
	}
	return f
}

func (f *fixedSecrets) set(d *api.SecretDelivery) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[d.Namespace+"/"+d.Name] = d
}

func (f *fixedSecrets) NodeSecret(_ context.Context, ns, name string) (*api.SecretDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.m[ns+"/"+name]; ok {
		return d, nil
	}
	return nil, errors.New("403 node n1 runs no instance that uses secret " + ns + "/" + name)
}

func secretWorkload(t *testing.T) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: default}
spec:
  type: Service
  source: {image: "localhost/kat-base:latest"}
  replicas: 1
  restartPolicy: {condition: Always}
  container:
    command: [/bin/sh, -c]
    args: ["sleep 60"]
    env:
      - {name: PLAIN, value: x}
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}
    volumeMounts: [{name: creds, mountPath: /run/secrets/db}]
  volumes: [{name: creds, secret: {secretName: db}}]
`)}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestMaterializeSecrets: the env file and the volume's files are written
// read-only, a new version replaces the files in place through ..data,
// the container spec mounts them and starts through the wrapper with no
// value in it, and forget removes everything.
func TestMaterializeSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := newFixedSecrets(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 1,
		Values: map[string][]byte{"password": []byte(agentSentinel), "user": []byte("app")}})
	s := &secretStore{dir: dir, source: src}
	q := secretWorkload(t)
	a := api.Assignment{InstanceID: "app-abc-1", Namespace: "default", Workload: "app"}
	if err := s.materialize(context.Background(), a, q); err != nil {
		t.Fatal(err)
	}
	inst := filepath.Join(dir, a.InstanceID)
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(inst, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read("env/DB_PASSWORD") != agentSentinel || read("vol/creds/password") != agentSentinel || read("vol/creds/user") != "app" {
		t.Fatal("the files do not hold the values")
	}
	if fi, err := os.Stat(filepath.Join(inst, "vol/creds/..data/password")); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("file mode %v, %v; want 0444", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(inst, "vol/creds")); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("volume mode %v, %v; want 0555", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(inst, "env/PLAIN")); !os.IsNotExist(err) {
		t.Errorf("a plain variable was written as a secret: %v", err)
	}

	// Version 2 drops user: the volume follows in place.
	src.set(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 2, Values: map[string][]byte{"password": []byte("new")}})
	if err := s.materialize(context.Background(), a, q); err != nil {
		t.Fatal(err)
	}
	if read("vol/creds/password") != "new" {
		t.Error("the volume did not take version 2")
	}
	if _, err := os.Lstat(filepath.Join(inst, "vol/creds/user")); !os.IsNotExist(err) {
		t.Errorf("a key version 2 dropped is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(inst, "vol/creds/..v1")); !os.IsNotExist(err) {
		t.Errorf("version 1 is still there: %v", err)
	}

	// A running instance's files follow the node's reference to version 3
	// by refresh; its env file does not (a new version of a variable is a
	// new instance). While the reference names the version the files
	// hold, or there is none, nothing is fetched but on a resync.
	src.set(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 3, Values: map[string][]byte{"password": []byte("v3")}})
	refresh := func(ref int64, resync bool) {
		t.Helper()
		version := func(ns, name string) (int64, bool) { return ref, ref != 0 && ns == "default" && name == "db" }
		if err := s.refresh(context.Background(), a, q, version, resync, map[string]*api.SecretDelivery{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		ref    int64
		resync bool
	}{{2, false}, {2, true}, {0, false}} {
		if refresh(c.ref, c.resync); read("vol/creds/password") != "new" {
			t.Fatalf("reference %d, resync %t: the volume was fetched again", c.ref, c.resync)
		}
	}
	if refresh(3, false); read("vol/creds/password") != "v3" || read("env/DB_PASSWORD") != "new" {
		t.Error("refresh did not update the volume only")
	}
	// The instance holds version 2: its variable's, which the files'
	// update does not change; an agent started again reads it back.
	if vs := s.versionsOf(a.InstanceID); !maps.Equal(vs, map[string]int64{"db": 2}) {
		t.Errorf("versions %v, want db 2", vs)
	}
	if vs := (&secretStore{dir: dir}).versionsOf(a.InstanceID); !maps.Equal(vs, map[string]int64{"db": 2}) {
		t.Errorf("versions read back %v, want db 2", vs)
	}
	if strings.Contains(read(versionsFile), agentSentinel) {
		t.Error("the versions file holds the value")
	}
	// A workload mounting the secret only holds the files' version.
	filesOnly := secretWorkload(t)
	filesOnly.Workload.Spec.Container.Env = nil
	b := api.Assignment{InstanceID: "files-1", Namespace: "default", Workload: "files"}
	if err := s.materialize(context.Background(), b, filesOnly); err != nil {
		t.Fatal(err)
	}
	src.set(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 5, Values: map[string][]byte{"password": []byte("v5")}})
	if err := s.refresh(context.Background(), b, filesOnly, func(string, string) (int64, bool) { return 5, true }, false, map[string]*api.SecretDelivery{}); err != nil {
		t.Fatal(err)
	}
	if vs := s.versionsOf(b.InstanceID); !maps.Equal(vs, map[string]int64{"db": 5}) {
		t.Errorf("versions of a file consumer %v, want db 5", vs)
	}
	src.set(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 3, Values: map[string][]byte{"password": []byte("v3")}})
	src.set(&api.SecretDelivery{Namespace: "default", Name: "db", Version: 4, Values: map[string][]byte{"password": []byte("v4")}})
	if refresh(0, true); read("vol/creds/password") != "v4" {
		t.Error("a resync did not fetch a secret without a reference")
	}
	cs, err := containerspec.For(q, containerspec.Instance{ID: a.InstanceID, Secrets: &containerspec.SecretPaths{Dir: inst, Agent: "/usr/bin/kat-agent"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{containerspec.ExecEnvBinary, "exec-env", containerspec.ExecEnvDir, "--", "/bin/sh", "-c", "sleep 60"}
	if got := append(append([]string{}, cs.Command...), cs.Args...); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("argv = %q, want %q", got, want)
	}
	mounts := map[string]string{}
	for _, m := range cs.Mounts {
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Target)
		}
		mounts[m.Target] = m.Source
	}
	if mounts["/run/secrets/db"] != filepath.Join(inst, "vol/creds") || mounts[containerspec.ExecEnvDir] != filepath.Join(inst, "env") ||
		mounts[containerspec.ExecEnvBinary] != "/usr/bin/kat-agent" {
		t.Errorf("mounts = %v", mounts)
	}
	for _, e := range cs.Env {
		if e.Name == "DB_PASSWORD" || strings.Contains(e.Value, agentSentinel) {
			t.Errorf("the secret variable is in the container's env: %+v", e)
		}
	}

	if err := s.forget(a.InstanceID); err != nil {
		t.Fatal(err)
	}
	if vs := s.versionsOf(a.InstanceID); vs != nil {
		t.Errorf("versions after forget: %v", vs)
	}
	if _, err := os.Stat(inst); !os.IsNotExist(err) {
		t.Errorf("after forget: %v", err)
	}
	// A secret the leader refuses names it.
	err = (&secretStore{dir: dir, source: newFixedSecrets()}).materialize(context.Background(), a, q)
	if err == nil || !strings.Contains(err.Error(), "fetch secret default/db") {
		t.Errorf("refused secret: %v", err)
	}
}
