package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/agent/containerspec"
)

// volumesWorkload has a SimpleClusterStorage volume (mounted whole and
// through a sub-path) and two read-only HostMounts, a DirectoryOrCreate and
// a FileOrCreate; HOST is replaced by a directory of the test.
const volumesWorkload = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: shop}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: 1
  restartPolicy: {condition: Never}
  container:
    command: ["/bin/sh", "-c"]
    args: ["id -u > /data/who && echo sub > /logs/f && cat /etc/app.conf > /data/conf && (touch /certs/x 2>/dev/null && echo rw || echo ro) > /data/certs"]
    volumeMounts:
      - {name: data, mountPath: /data}
      - {name: data, mountPath: /logs, subPath: logs/web}
      - {name: certs, mountPath: /certs, readOnly: true}
      - {name: config, mountPath: /etc/app.conf, readOnly: true}
  volumes:
    - {name: data, simpleClusterStorage: {}}
    - name: certs
      hostMount: {hostPath: HOST/certs, ensureType: DirectoryOrCreate}
    - name: config
      hostMount: {hostPath: HOST/conf/app.conf, ensureType: FileOrCreate}
`

// TestWorkloadVolumesInContainer runs the container the agent's spec
// builder makes of a workload with a SimpleClusterStorage volume (whole and
// through a sub-path) and a read-only FileOrCreate HostMount, and checks
// what the container wrote from the host.
func TestWorkloadVolumesInContainer(t *testing.T) {
	pm, ids := podmanForAgentTest(t)
	mark := randomHex(t)
	const testLabel = "kat.test"
	t.Cleanup(func() { removeMarked(t, pm, testLabel, mark) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, host := t.TempDir(), t.TempDir()
	files := map[string][]byte{quadlet.WorkloadFile: []byte(strings.ReplaceAll(volumesWorkload, "HOST", host))}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slot := int(ids.Slots()/3) + 2 // apart from the other agent tests' slots
	a := api.Assignment{InstanceID: "kat-agent-test-" + mark + "-vol", Node: "n1", Namespace: "shop", Workload: "web",
		Generation: 1, SpecHash: "abc", Image: baseImage, UserNSSlot: &slot}
	spec, err := NewSpecBuilder("n1", base, &ids)(a, q, SpecInputs{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Labels[testLabel] = mark
	if err := os.WriteFile(filepath.Join(host, "conf", "app.conf"), []byte("from-host"), 0o644); err != nil {
		t.Fatal(err)
	}

	id, err := pm.RunContainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitExitOutput(t, ctx, pm, id)
	data := containerspec.SimpleClusterStoragePath(base, "shop", "web", "data")
	for file, want := range map[string]string{
		"who":        "0",
		"logs/web/f": "sub",
		"conf":       "from-host",
		"certs":      "ro",
	} {
		b, err := os.ReadFile(filepath.Join(data, file))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s on the host: %q, %v; want %q", file, b, err, want)
		}
	}
}
