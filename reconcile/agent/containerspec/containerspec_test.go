package containerspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
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
	got, err := For(q, inst)
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.ContainerSpec{
		Name:     "web-0123abcd-x7k2",
		Image:    "localhost/kat-base:latest",
		Command:  []string{"/bin/sh", "-c"},
		Args:     []string{"exec httpd -f -p 8080"},
		Env:      []runtime.EnvVar{{Name: "GREETING", Value: "hello"}, {Name: "EMPTY"}},
		Hostname: "web-0123abcd-x7k2",
		Labels: map[string]string{
			runtime.LabelManaged: "true", runtime.LabelNamespace: "shop", runtime.LabelWorkload: "web", runtime.LabelInstance: "web-0123abcd-x7k2",
			runtime.LabelSpecHash: "0123abcd", runtime.LabelGeneration: "3", runtime.LabelSourceCommit: "c0ffee", runtime.LabelNode: "node-1",
		},
		Ports: []runtime.PortMapping{
			{HostPort: 8080, ContainerPort: 8080, Protocol: "tcp"},
			{HostPort: 5353, ContainerPort: 53, Protocol: "udp"},
		},
		Mounts: []runtime.Mount{
			{Source: "/var/lib/kat/volumes/shop/web/data", Target: "/data", Chown: true},
			{Source: "/var/lib/kat/volumes/shop/web/data/logs/web", Target: "/logs", Chown: true},
			{Source: "/srv/certs", Target: "/certs", ReadOnly: true},
			{Source: "/srv/app.conf", Target: "/etc/app.conf", ReadOnly: true},
		},
		CPUMillis:   500,
		MemoryBytes: 64 << 20,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("For:\n got %+v\nwant %+v", got, want)
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
			_, err := For(q, tc.inst)
			if !errors.Is(err, runtime.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "shop/web") {
				t.Fatalf("got %v, want ErrInvalidSpec naming shop/web and %q", err, tc.want)
			}
		})
	}
}
