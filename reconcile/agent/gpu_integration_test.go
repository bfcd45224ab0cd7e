package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// cdiSpecDir is the CDI spec directory Podman 4.3 reads besides /etc/cdi
// (it has no flag or setting for another); what lives there is gone at the
// next boot.
const cdiSpecDir = "/var/run/cdi"

// fakeAMDCDISpec is a CDI spec for two AMD GPUs, as amd-ctk cdi generate
// writes one, whose device nodes are DIR/renderD128 and DIR/renderD129.
// Under a user namespace runc binds a device node from the host's path of
// the same name, so they must exist there too (fakeGPUNodes).
const fakeAMDCDISpec = `{"cdiVersion": "0.5.0", "kind": "amd.com/gpu", "devices": [
 {"name": "0", "containerEdits": {"deviceNodes": [{"path": "DIR/renderD128"}]}},
 {"name": "1", "containerEdits": {"deviceNodes": [{"path": "DIR/renderD129"}], "env": ["KAT_TEST_GPU=amd1"]}}]}`

// fakeGPUNodes makes a directory of /dev holding renderD128 and renderD129,
// character devices as /dev/null and /dev/zero are, removed when the test
// ends.
func fakeGPUNodes(t *testing.T, mark string) string {
	t.Helper()
	dir := "/dev/kat-test-" + mark
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for name, minor := range map[string]uint32{"renderD128": 3, "renderD129": 5} {
		if err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o666, int(unix.Mkdev(1, minor))); err != nil {
			t.Fatalf("make a fake GPU device node: %v", err)
		}
	}
	return dir
}

// TestGPUReachesTheContainer: on a node whose faked nvidia-smi reports one
// NVIDIA GPU and faked rocm-smi two AMD GPUs, with a CDI spec for the AMD
// ones only, an instance holding the second AMD GPU sees that GPU's device
// node and environment and no other GPU's; one holding the NVIDIA GPU, which
// no CDI spec defines, fails with an error naming the device, and so does
// one holding a GPU the node lacks.
func TestGPUReachesTheContainer(t *testing.T) {
	pm, ids := podmanForAgentTest(t)
	for _, dir := range []string{"/etc/cdi", cdiSpecDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if b, _ := os.ReadFile(filepath.Join(dir, e.Name())); strings.Contains(string(b), "amd.com/gpu") || strings.Contains(string(b), "nvidia.com/gpu") {
				t.Skipf("skipping: %s/%s is a real GPU's CDI spec, which this test's fake would clash with", dir, e.Name())
			}
		}
	}
	mark := randomHex(t)
	const testLabel = "kat.test"
	t.Cleanup(func() { removeMarked(t, pm, testLabel, mark) })
	if err := os.MkdirAll(cdiSpecDir, 0o755); err != nil {
		t.Fatal(err)
	}
	nodes := fakeGPUNodes(t, mark)
	specFile := filepath.Join(cdiSpecDir, "kat-test-"+mark+".json")
	if err := os.WriteFile(specFile, []byte(strings.ReplaceAll(fakeAMDCDISpec, "DIR", nodes)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(specFile) })

	gpus := detectGPUs(fakeGPUTools(t, "0, NVIDIA A10, 23028\n", rocmSMIOutput))
	if len(gpus) != 3 || gpus[2].Device != "amd.com/gpu=1" {
		t.Fatalf("detected %+v, want an NVIDIA GPU and two AMD GPUs", gpus)
	}
	q, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: gpu, namespace: default}
spec:
  type: Service
  replicas: 1
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Never}
  container:
    command: ["/bin/sh", "-c", "ls /dev/kat-test-*; echo env=$KAT_TEST_GPU"]
    resources: {gpu: {driver: amd}}
`)}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	slot := int(ids.Slots()/3) + 3 // apart from the other agent tests' slots
	build := WithGPUs(NewSpecBuilder("n1", t.TempDir(), &ids), gpus)
	run := func(name string, gpu int) (string, error) {
		a := api.Assignment{InstanceID: "kat-agent-test-" + mark + "-" + name, Node: "n1", Namespace: "default", Workload: "gpu",
			Generation: 1, SpecHash: "abc", Image: baseImage, UserNSSlot: &slot, GPU: &gpu}
		spec, err := build(a, q, SpecInputs{})
		if err != nil {
			return "", err
		}
		spec.Labels[testLabel] = mark
		return pm.RunContainer(ctx, spec)
	}

	id, err := run("amd", 2)
	if err != nil {
		t.Fatal(err)
	}
	out := waitExitOutput(t, ctx, pm, id)
	if got := strings.Fields(out); !slices.Equal(got, []string{"renderD129", "env=amd1"}) {
		t.Fatalf("the container saw %q, want only the second AMD GPU's device node and environment", out)
	}

	_, err = run("nvidia", 0)
	if !errors.Is(err, runtime.ErrDeviceUnavailable) || !errors.Is(err, runtime.ErrInvalidSpec) || !strings.Contains(err.Error(), "nvidia.com/gpu=0") {
		t.Fatalf("a GPU no CDI spec defines: got %v, want ErrDeviceUnavailable naming nvidia.com/gpu=0", err)
	}
	_, err = run("none", 5)
	if !errors.Is(err, runtime.ErrDeviceUnavailable) || !strings.Contains(err.Error(), "GPU 5") {
		t.Fatalf("a GPU the node lacks: got %v, want ErrDeviceUnavailable naming GPU 5", err)
	}
}

// waitExitOutput waits until container id exits 0 and returns its output.
func waitExitOutput(t *testing.T, ctx context.Context, pm *runtime.Podman, id string) string {
	t.Helper()
	var st *runtime.ContainerStatus
	polltest.UntilErr(t, 30*time.Second, "container exits", func() error {
		var err error
		st, err = pm.InspectContainer(ctx, id)
		if err == nil && st.State != runtime.StateExited {
			return fmt.Errorf("container %s", st.State)
		}
		return err
	})
	rc, err := pm.Logs(ctx, id, runtime.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 0 {
		t.Fatalf("container exited %d: %s", st.ExitCode, out)
	}
	return string(out)
}
