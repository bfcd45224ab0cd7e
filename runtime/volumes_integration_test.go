package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWorkloadVolumesInContainer runs a workload's container with a
// SimpleClusterStorage volume (whole and through a sub-path) and a read-only
// FileOrCreate HostMount, and checks what the container wrote from the host.
func TestWorkloadVolumesInContainer(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	base := t.TempDir()
	host := t.TempDir()
	workload := strings.NewReplacer(
		"/srv/certs", filepath.Join(host, "certs"),
		"/srv/app.conf", filepath.Join(host, "conf", "app.conf"),
		`args: ["exec httpd -f -p 8080"]`,
		`args: ["id -u > /data/who && echo sub > /logs/f && cat /etc/app.conf > /data/conf && (touch /certs/x 2>/dev/null && echo rw || echo ro) > /data/certs"]`,
	).Replace(testWorkload)
	q := parseTestWorkload(t, workload, "")
	m, _ := testIDMap()
	inst := Instance{ID: "kat-rt-test-" + mark + "-vol", VolumeBasePath: base, Generation: 1, SpecHash: "abc", IDMap: m}
	spec, err := ContainerSpecFor(q, inst)
	if err != nil {
		t.Fatal(err)
	}
	spec.Labels[testLabel] = mark
	vols, err := VolumePaths(q, inst)
	if err != nil {
		t.Fatal(err)
	}
	if err := PrepareVolumes(vols); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(host, "conf", "app.conf"), []byte("from-host"), 0o644))

	id, err := pm.CreateContainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	must(t, pm.StartContainer(ctx, id))
	var st *ContainerStatus
	eventually(t, 30*time.Second, "container exits", func() (bool, error) {
		st, err = pm.InspectContainer(ctx, id)
		return err == nil && st.State == StateExited, err
	})
	if st.ExitCode != 0 {
		rc, _ := pm.Logs(ctx, id, LogOptions{})
		out := make([]byte, 4096)
		n, _ := rc.Read(out)
		rc.Close()
		t.Fatalf("container exited %d: %s", st.ExitCode, out[:n])
	}
	data := SimpleClusterStoragePath(base, "shop", "web", "data")
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
