package agent

import (
	"os"
	"path/filepath"
	"testing"

	"kat.dws.rip/kat/api"
)

func TestResourcesFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		milliCPU int64
		mem      int64
		want     api.NodeResources
	}{
		{
			name: "small host reserves a tenth", milliCPU: 2000, mem: 4 << 30,
			want: api.NodeResources{
				Capacity:    api.ResourceList{CPU: "2000m", Memory: "4096Mi"},
				Allocatable: api.ResourceList{CPU: "1800m", Memory: "3686Mi"},
			},
		},
		{
			name: "big host caps the memory reservation at 1Gi", milliCPU: 16000, mem: 64 << 30,
			want: api.NodeResources{
				Capacity:    api.ResourceList{CPU: "16000m", Memory: "65536Mi"},
				Allocatable: api.ResourceList{CPU: "14400m", Memory: "64512Mi"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := resourcesFor(tc.milliCPU, tc.mem); got != tc.want {
				t.Fatalf("resourcesFor(%d, %d) = %+v, want %+v", tc.milliCPU, tc.mem, got, tc.want)
			}
		})
	}
}

func TestMemTotal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("MemFree: 1 kB\nMemTotal:       2048 kB\n"), 0o600)
	if got, err := memTotal(good); err != nil || got != 2048<<10 {
		t.Fatalf("memTotal = %d, %v; want %d", got, err, 2048<<10)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("MemFree: 1 kB\n"), 0o600)
	if _, err := memTotal(bad); err == nil {
		t.Fatal("memTotal without a MemTotal line succeeded")
	}
	if _, err := DetectResources(); err != nil {
		t.Fatalf("DetectResources on this host: %v", err)
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	t.Parallel()
	got := parseNvidiaSMI("0, NVIDIA A10, 23028\n1, Tesla T4, 15360\ngarbage\n")
	if len(got) != 2 || got[1] != (api.GPU{Index: 1, Name: "Tesla T4", Driver: "nvidia", VRAMMiB: 15360, Device: "nvidia.com/gpu=1"}) {
		t.Fatalf("parseNvidiaSMI = %+v", got)
	}
}
