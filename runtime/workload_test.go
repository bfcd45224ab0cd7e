package runtime

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

const testWorkload = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: web
  namespace: shop
spec:
  type: Service
  source:
    image: localhost/kat-base:latest
  replicas: 2
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c"]
    args: ["exec httpd -f -p 8080"]
    env:
      - name: GREETING
        value: hello
      - name: EMPTY
    volumeMounts:
      - name: data
        mountPath: /data
      - name: data
        mountPath: /logs
        subPath: logs/web
      - name: certs
        mountPath: /certs
        readOnly: true
      - name: config
        mountPath: /etc/app.conf
        readOnly: true
    resources:
      limits:
        cpu: 500m
        memory: 64Mi
  volumes:
    - name: data
      simpleClusterStorage: {}
    - name: certs
      hostMount:
        hostPath: /srv/certs
        ensureType: DirectoryOrCreate
    - name: config
      hostMount:
        hostPath: /srv/app.conf
        ensureType: FileOrCreate
`

const testLB = `apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: 8080
    - name: dns
      containerPort: 53
      protocol: UDP
`

func parseTestWorkload(t *testing.T, workload string, lb string) *quadlet.Quadlet {
	t.Helper()
	files := map[string][]byte{quadlet.WorkloadFile: []byte(workload)}
	if lb != "" {
		files["VirtualLoadBalancer.kat"] = []byte(lb)
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatalf("parse test workload: %v", err)
	}
	return q
}

func TestContainerSpecFor(t *testing.T) {
	q := parseTestWorkload(t, testWorkload, testLB)
	inst := Instance{
		ID: "web-0123abcd-x7k2", Node: "node-1", Generation: 3, SpecHash: "0123abcd",
		SourceCommit: "c0ffee", VolumeBasePath: "/var/lib/kat/volumes", HostPorts: map[int]int{53: 5353},
	}
	got, err := ContainerSpecFor(q, inst)
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerSpec{
		Name:     "web-0123abcd-x7k2",
		Image:    "localhost/kat-base:latest",
		Command:  []string{"/bin/sh", "-c"},
		Args:     []string{"exec httpd -f -p 8080"},
		Env:      []EnvVar{{"GREETING", "hello"}, {"EMPTY", ""}},
		Hostname: "web-0123abcd-x7k2",
		Labels: map[string]string{
			LabelManaged: "true", LabelNamespace: "shop", LabelWorkload: "web", LabelInstance: "web-0123abcd-x7k2",
			LabelSpecHash: "0123abcd", LabelGeneration: "3", LabelSourceCommit: "c0ffee", LabelNode: "node-1",
		},
		Ports: []PortMapping{
			{HostPort: 8080, ContainerPort: 8080, Protocol: "tcp"},
			{HostPort: 5353, ContainerPort: 53, Protocol: "udp"},
		},
		Mounts: []Mount{
			{Source: "/var/lib/kat/volumes/shop/web/data", Target: "/data", Chown: true},
			{Source: "/var/lib/kat/volumes/shop/web/data/logs/web", Target: "/logs", Chown: true},
			{Source: "/srv/certs", Target: "/certs", ReadOnly: true},
			{Source: "/srv/app.conf", Target: "/etc/app.conf", ReadOnly: true},
		},
		CPUMillis:   500,
		MemoryBytes: 64 << 20,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ContainerSpecFor:\n got %+v\nwant %+v", got, want)
	}

	vols, err := VolumePaths(q, inst)
	if err != nil {
		t.Fatal(err)
	}
	wantVols := []VolumePath{
		{Name: "data", Path: "/var/lib/kat/volumes/shop/web/data", Ensure: EnsureDirectoryOrCreate, ClusterStorage: true, SubPaths: []string{"logs/web"}},
		{Name: "certs", Path: "/srv/certs", Ensure: EnsureDirectoryOrCreate},
		{Name: "config", Path: "/srv/app.conf", Ensure: EnsureFileOrCreate},
	}
	if !reflect.DeepEqual(vols, wantVols) {
		t.Fatalf("VolumePaths:\n got %+v\nwant %+v", vols, wantVols)
	}
}

func TestContainerSpecForRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		workload string
		inst     Instance
		want     string
	}{
		{"no instance id", testWorkload, Instance{VolumeBasePath: "/v"}, "instance id is required"},
		{"git source without a built image", "git", Instance{ID: "web-1", VolumeBasePath: "/v"}, "spec.source: no image to run"},
		{"cluster storage without a base path", testWorkload, Instance{ID: "web-1"}, "spec.volumes[0]: simpleClusterStorage needs the agent's volumeBasePath"},
		{"relative base path", testWorkload, Instance{ID: "web-1", VolumeBasePath: "vols"}, `absolute path (got "vols")`},
		{"sub-path of a file volume", strings.Replace(testWorkload, "        mountPath: /etc/app.conf\n",
			"        mountPath: /etc/app.conf\n        subPath: x\n", 1), Instance{ID: "web-1", VolumeBasePath: "/v"},
			`spec.container.volumeMounts[3].subPath: volume "config" is a fileorcreate`},
		{"host port out of range", testWorkload, Instance{ID: "web-1", VolumeBasePath: "/v", HostPorts: map[int]int{8080: 70000}},
			"ports[0].hostPort: 70000 is out of range"},
		{"bad instance id", testWorkload, Instance{ID: "-web", VolumeBasePath: "/v"}, `name: "-web" is not a valid container name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var q *quadlet.Quadlet
			if tc.workload == "git" {
				// Built from Git: only the built image can run.
				q = parseTestWorkload(t, testWorkload, testLB)
				q.Workload.Spec.Source = quadlet.Source{Git: &quadlet.GitSource{Repository: "https://git.example.com/app.git"}}
			} else {
				q = parseTestWorkload(t, tc.workload, testLB)
			}
			_, err := ContainerSpecFor(q, tc.inst)
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "shop/web") {
				t.Fatalf("got %v, want ErrInvalidSpec naming shop/web and %q", err, tc.want)
			}
		})
	}
}

func TestPrepareVolumes(t *testing.T) {
	type kind int
	const (
		absent kind = iota
		dir
		file
		socket
	)
	make := func(t *testing.T, p string, k kind) {
		t.Helper()
		switch k {
		case dir:
			must(t, os.MkdirAll(p, 0o755))
		case file:
			must(t, os.WriteFile(p, []byte("x"), 0o644))
		case socket:
			l, err := net.Listen("unix", p)
			must(t, err)
			t.Cleanup(func() { l.Close() })
		}
	}
	for _, tc := range []struct {
		name    string
		ensure  string
		have    kind
		wantErr string // "" for success
		after   kind   // what the path is afterwards, on success
	}{
		{"DirectoryOrCreate creates", EnsureDirectoryOrCreate, absent, "", dir},
		{"DirectoryOrCreate keeps a directory", EnsureDirectoryOrCreate, dir, "", dir},
		{"DirectoryOrCreate refuses a file", EnsureDirectoryOrCreate, file, "exists but is not a directory", file},
		{"Directory accepts a directory", EnsureDirectory, dir, "", dir},
		{"Directory refuses absence", EnsureDirectory, absent, "ensureType Directory: does not exist", absent},
		{"Directory refuses a file", EnsureDirectory, file, "exists but is not a directory", file},
		{"FileOrCreate creates", EnsureFileOrCreate, absent, "", file},
		{"FileOrCreate keeps a file", EnsureFileOrCreate, file, "", file},
		{"FileOrCreate refuses a directory", EnsureFileOrCreate, dir, "exists but is not a regular file", dir},
		{"File accepts a file", EnsureFile, file, "", file},
		{"File refuses absence", EnsureFile, absent, "ensureType File: does not exist", absent},
		{"File refuses a directory", EnsureFile, dir, "exists but is not a regular file", dir},
		{"Socket accepts a socket", EnsureSocket, socket, "", socket},
		{"Socket refuses a file", EnsureSocket, file, "exists but is not a unix socket", file},
		{"Socket refuses absence", EnsureSocket, absent, "ensureType Socket: does not exist", absent},
		{"no ensureType checks nothing", EnsureNone, absent, "", absent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a", "v")
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			make(t, p, tc.have)
			err := PrepareVolumes([]VolumePath{{Name: "vol", Path: p, Ensure: tc.ensure}})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), tc.wantErr) ||
					!strings.Contains(err.Error(), `volume "vol" at `+p) {
					t.Fatalf("got %v, want ErrVolumeNotReady naming the volume, its path and %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := kindOf(p); got != map[kind]string{absent: "absent", dir: "dir", file: "file", socket: "socket"}[tc.after] {
				t.Fatalf("afterwards the path is %s", got)
			}
		})
	}
}

func TestPrepareVolumesSubPaths(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "ns", "wl", "data")
	vols := []VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, ClusterStorage: true, SubPaths: []string{"logs/web", "one"}}}
	must(t, PrepareVolumes(vols))
	must(t, PrepareVolumes(vols)) // idempotent
	for _, p := range []string{vol, filepath.Join(vol, "logs", "web"), filepath.Join(vol, "one")} {
		if kindOf(p) != "dir" {
			t.Fatalf("%s is %s, want a directory", p, kindOf(p))
		}
	}
	// A symbolic link planted inside the volume must not lead a sub-path
	// mount outside it.
	must(t, os.Symlink("/etc", filepath.Join(vol, "evil")))
	err := PrepareVolumes([]VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, SubPaths: []string{"evil/ssl"}}})
	if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), "is a symbolic link, refused") {
		t.Fatalf("sub-path through a symlink: got %v", err)
	}
	must(t, os.WriteFile(filepath.Join(vol, "afile"), nil, 0o644))
	err = PrepareVolumes([]VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, SubPaths: []string{"afile/x"}}})
	if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("sub-path below a file: got %v", err)
	}
}

func kindOf(p string) string {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return "absent"
	case fi.IsDir():
		return "dir"
	case fi.Mode().IsRegular():
		return "file"
	case fi.Mode().Type() == os.ModeSocket:
		return "socket"
	}
	return fi.Mode().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
