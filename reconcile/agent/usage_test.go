package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/runtime"
)

// burnCPU spins until the process has used at least d more CPU.
func burnCPU(t *testing.T, d time.Duration) {
	t.Helper()
	start := processCPU(t)
	for x := 0; processCPU(t)-start < d; x++ {
		for i := range 100000 {
			x ^= i
		}
	}
}

// processCPU is the CPU time this process has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	// The command (field 2) may hold spaces: count from its ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// TestUsageSamplerReadsThisHost samples the node and, as a container, the
// test process itself from this host's real /proc and cgroup files: the
// CPU it burns between two samples shows in its container's and the node's
// CPU, and its memory and the node's are counted.
func TestUsageSamplerReadsThisHost(t *testing.T) {
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		t.Skip("skipping: no /sys/fs/cgroup")
	}
	clock := time.Unix(1_800_000_000, 0)
	s := newUsageSampler("/proc", "/sys/fs/cgroup", "/sys/block", func() time.Time { return clock })
	self := runtime.ContainerStatus{ID: "self", State: runtime.StateRunning, Pid: os.Getpid(),
		Labels: map[string]string{runtime.LabelInstance: "web-1", runtime.LabelNamespace: "shop", runtime.LabelWorkload: "web"}}
	gone := runtime.ContainerStatus{ID: "gone", State: runtime.StateRunning, Pid: 1 << 30,
		Labels: map[string]string{runtime.LabelInstance: "web-2"}}
	first, err := s.Sample([]runtime.ContainerStatus{self, gone})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Containers) != 1 || first.Containers[0].CPUMillis != 0 || first.CPUMillis != 0 {
		t.Fatalf("first sample %+v: want one container and no CPU rate yet", first)
	}
	burnCPU(t, 200*time.Millisecond)
	clock = clock.Add(time.Second)
	u, err := s.Sample([]runtime.ContainerStatus{self})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Containers) != 1 {
		t.Fatalf("containers %+v, want the test process", u.Containers)
	}
	c := u.Containers[0]
	want := api.ContainerUsage{Namespace: "shop", Workload: "web", InstanceID: "web-1"}
	if c.Namespace != want.Namespace || c.Workload != want.Workload || c.InstanceID != want.InstanceID {
		t.Errorf("container %+v, want %+v", c, want)
	}
	// 200 ms of CPU in one (fake) second: at least 200 millicores, in the
	// process's cgroup and on the node.
	if c.CPUMillis < 200 || u.CPUMillis < 200 {
		t.Errorf("CPU: container %dm, node %dm; want at least 200m each", c.CPUMillis, u.CPUMillis)
	}
	if c.MemoryBytes <= 0 || u.MemoryBytes <= 0 || u.SampledAt != clock.Unix() {
		t.Errorf("memory: container %d, node %d bytes; sampled at %d", c.MemoryBytes, u.MemoryBytes, u.SampledAt)
	}
	if u.NetworkRxBytes < 0 || c.NetworkRxBytes < 0 {
		t.Errorf("network counters %+v", u.ResourceUsage)
	}
}

// TestUsageSamplerCgroupV2 reads a container of a cgroup v2 host, laid out
// as the kernel does under a test directory.
func TestUsageSamplerCgroupV2(t *testing.T) {
	t.Parallel()
	proc, cg := t.TempDir(), t.TempDir()
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(proc, "stat"), "cpu  100 0 100 1000 50 0 0 0 0 0\ncpu0 100 0 100 1000 50 0 0 0 0 0\n")
	write(filepath.Join(proc, "meminfo"), "MemTotal:       4000000 kB\nMemFree:         100000 kB\nMemAvailable:    3000000 kB\n")
	write(filepath.Join(proc, "diskstats"), "   8       0 sda 10 0 8 0 20 0 16 0 0 0 0\n   8       1 sda1 10 0 8 0 20 0 16 0 0 0 0\n   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0\n")
	netDev := "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n  eth0: 1000 1 0 0 0 0 0 0 2000 2 0 0 0 0 0 0\n"
	write(filepath.Join(proc, "net", "dev"), netDev)
	write(filepath.Join(proc, "42", "cgroup"), "0::/machine.slice/libpod-abc.scope\n")
	write(filepath.Join(proc, "42", "net", "dev"), netDev)
	dir := filepath.Join(cg, "machine.slice", "libpod-abc.scope")
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\n")
	write(filepath.Join(dir, "memory.current"), "52428800\n")
	write(filepath.Join(dir, "io.stat"), "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:0 rbytes=1 wbytes=2\n")
	blocks := t.TempDir()
	write(filepath.Join(blocks, "sda", "size"), "1")
	write(filepath.Join(blocks, "loop0", "size"), "1")

	clock := time.Unix(1_800_000_000, 0)
	s := newUsageSampler(proc, cg, blocks, func() time.Time { return clock })
	c := runtime.ContainerStatus{ID: "abc", State: runtime.StateRunning, Pid: 42, Labels: map[string]string{runtime.LabelInstance: "web-1"}}
	if _, err := s.Sample([]runtime.ContainerStatus{c}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(2 * time.Second)
	write(filepath.Join(dir, "cpu.stat"), "usage_usec 2000000\n")
	write(filepath.Join(proc, "stat"), "cpu  200 0 200 1200 60 0 0 0 0 0\n")
	u, err := s.Sample([]runtime.ContainerStatus{c})
	if err != nil {
		t.Fatal(err)
	}
	wantNode := api.ResourceUsage{CPUMillis: 1000, MemoryBytes: 1000000 << 10, DiskReadBytes: 8 * 512, DiskWriteBytes: 16 * 512,
		NetworkRxBytes: 1000, NetworkTxBytes: 2000}
	if u.ResourceUsage != wantNode {
		t.Errorf("node %+v\nwant %+v", u.ResourceUsage, wantNode)
	}
	wantC := api.ResourceUsage{CPUMillis: 500, MemoryBytes: 50 << 20, DiskReadBytes: 4097, DiskWriteBytes: 8194,
		NetworkRxBytes: 1000, NetworkTxBytes: 2000}
	if len(u.Containers) != 1 || u.Containers[0].ResourceUsage != wantC {
		t.Errorf("containers %+v\nwant one with %+v", u.Containers, wantC)
	}
}
