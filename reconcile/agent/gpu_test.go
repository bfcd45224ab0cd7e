package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// rocmSMIOutput is what rocm-smi --showproductname --showmeminfo vram
// --json prints on a node with two AMD GPUs (fields it prints besides
// these left out).
const rocmSMIOutput = `{"card1": {"Card series": "Radeon RX 7900 XTX", "Card model": "0x744c", "VRAM Total Memory (B)": "25753026560"},
 "card0": {"Card series": "Instinct MI210", "Card model": "0x740f", "VRAM Total Memory (B)": "68702699520"}}`

// fakeGPUTools writes nvidia-smi and rocm-smi scripts into a directory that
// print out (nothing when "") for the arguments DetectGPUs passes, and
// fail for any others; it returns a lookPath that finds only them.
func fakeGPUTools(t *testing.T, nvidia, rocm string) func(string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	write := func(tool, args, out string) {
		if out == "" {
			return
		}
		if err := os.WriteFile(filepath.Join(dir, tool+".out"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		script := "#!/bin/sh\n[ \"$*\" = '" + args + "' ] || { echo \"unexpected arguments: $*\" >&2; exit 2; }\nexec cat " + filepath.Join(dir, tool+".out") + "\n"
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("nvidia-smi", "--query-gpu=index,name,memory.total --format=csv,noheader,nounits", nvidia)
	write("rocm-smi", "--showproductname --showmeminfo vram --json", rocm)
	return func(tool string) (string, error) {
		p := filepath.Join(dir, tool)
		if _, err := os.Stat(p); err != nil {
			return "", exec.ErrNotFound
		}
		return p, nil
	}
}

// TestDetectGPUs runs faked nvidia-smi and rocm-smi tools: NVIDIA's GPUs
// come first, AMD's follow numbered on, each with its vendor's CDI name.
func TestDetectGPUs(t *testing.T) {
	t.Parallel()
	nvidia := "0, NVIDIA A10, 23028\n"
	a10 := api.GPU{Index: 0, Name: "NVIDIA A10", Driver: "nvidia", VRAMMiB: 23028, Device: "nvidia.com/gpu=0"}
	mi210 := api.GPU{Index: 1, Name: "Instinct MI210", Driver: "amd", VRAMMiB: 65520, Device: "amd.com/gpu=0"}
	rx := api.GPU{Index: 2, Name: "Radeon RX 7900 XTX", Driver: "amd", VRAMMiB: 24560, Device: "amd.com/gpu=1"}
	for _, tc := range []struct {
		name         string
		nvidia, rocm string
		want         []api.GPU
	}{
		{name: "none", want: nil},
		{name: "nvidia only", nvidia: nvidia, want: []api.GPU{a10}},
		{name: "amd only", rocm: rocmSMIOutput, want: []api.GPU{
			{Index: 0, Name: mi210.Name, Driver: "amd", VRAMMiB: mi210.VRAMMiB, Device: "amd.com/gpu=0"},
			{Index: 1, Name: rx.Name, Driver: "amd", VRAMMiB: rx.VRAMMiB, Device: "amd.com/gpu=1"}}},
		{name: "both", nvidia: nvidia, rocm: rocmSMIOutput, want: []api.GPU{a10, mi210, rx}},
		{name: "rocm-smi prints no JSON", nvidia: nvidia, rocm: "ERROR: no AMD GPU\n", want: []api.GPU{a10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := detectGPUs(fakeGPUTools(t, tc.nvidia, tc.rocm)); !slices.Equal(got, tc.want) {
				t.Fatalf("detectGPUs = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestSpecBuilderGPU: an instance holding a GPU gets that GPU's CDI device
// and no other; one the node does not have, or cannot name, fails it
// (runtime.ErrDeviceUnavailable wraps runtime.ErrInvalidSpec) naming it.
func TestSpecBuilderGPU(t *testing.T) {
	t.Parallel()
	q, err := quadlet.ParseWorkload(graceWorkload(""), quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := &runtime.SubIDRange{Start: 100000, Count: runtime.IDMapSize}
	gpus := []api.GPU{
		{Index: 0, Name: "NVIDIA A10", Driver: "nvidia", Device: "nvidia.com/gpu=0"},
		{Index: 1, Name: "Instinct MI210", Driver: "amd", Device: "amd.com/gpu=0"},
		{Index: 2, Name: "old", Driver: "nvidia"},
	}
	gpu := func(n int) *int { return &n }
	for _, tc := range []struct {
		name    string
		gpu     *int
		want    []string
		wantErr string
	}{
		{name: "no gpu", want: nil},
		{name: "amd gpu", gpu: gpu(1), want: []string{"amd.com/gpu=0"}},
		{name: "nvidia gpu", gpu: gpu(0), want: []string{"nvidia.com/gpu=0"}},
		{name: "gpu the node lacks", gpu: gpu(7), wantErr: "instance web-1 holds GPU 7, which this node does not have (it has 3)"},
		{name: "gpu without a cdi name", gpu: gpu(2), wantErr: "instance web-1 holds GPU 2 (old), which has no CDI device name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			slot := 0
			a := api.Assignment{InstanceID: "web-1", Namespace: "ns1", Workload: "web", Generation: 1,
				Image: "localhost/kat-base:latest", UserNSSlot: &slot, GPU: tc.gpu}
			spec, err := WithGPUs(NewSpecBuilder("n1", t.TempDir(), ids), gpus)(a, q, SpecInputs{})
			if tc.wantErr != "" {
				if !errors.Is(err, runtime.ErrDeviceUnavailable) || !errors.Is(err, runtime.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want ErrDeviceUnavailable saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(spec.Devices, tc.want) {
				t.Fatalf("Devices %q, want %q", spec.Devices, tc.want)
			}
			if err := spec.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
