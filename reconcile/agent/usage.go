package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/runtime"
)

// UsageSampler samples what the node and its containers use from the
// kernel's files, reading a handful per container and starting no process:
// the node's /proc/stat, /proc/meminfo, /proc/diskstats and /proc/net/dev,
// and each container's cgroup (cgroup v1's cpuacct.usage,
// memory.usage_in_bytes and blkio.throttle.io_service_bytes, or v2's
// cpu.stat, memory.current and io.stat) and its network namespace's
// /proc/PID/net/dev. CPU is a rate over the time since the previous sample,
// so the first sample of the node or a container has none. It is safe for
// concurrent use.
type UsageSampler struct {
	// proc and cgroupRoot are /proc and /sys/fs/cgroup, but in tests.
	proc, cgroupRoot string
	now              func() time.Time

	mu sync.Mutex
	// disks are the whole block devices /proc/diskstats is summed over.
	disks map[string]bool
	// last are the previous CPU counters: the node's under "", each
	// container's under its ID.
	last map[string]cpuMark
	// cgroups caches each container's cgroup files, by ID and PID.
	cgroups map[string]containerCgroup
}

// cpuMark is a CPU counter (nanoseconds of CPU) and when it was read.
type cpuMark struct {
	ns int64
	at time.Time
}

// containerCgroup is where a container's counters live.
type containerCgroup struct {
	pid int
	// cpu, memory and io are the files; v2 says they are cgroup v2's.
	cpu, memory, io string
	v2              bool
}

// NewUsageSampler returns a sampler of this host.
func NewUsageSampler() *UsageSampler {
	return newUsageSampler("/proc", "/sys/fs/cgroup", "/sys/block", time.Now)
}

func newUsageSampler(proc, cgroupRoot, sysBlock string, now func() time.Time) *UsageSampler {
	s := &UsageSampler{proc: proc, cgroupRoot: cgroupRoot, now: now, disks: map[string]bool{},
		last: map[string]cpuMark{}, cgroups: map[string]containerCgroup{}}
	entries, _ := os.ReadDir(sysBlock)
	for _, e := range entries {
		if n := e.Name(); !strings.HasPrefix(n, "loop") && !strings.HasPrefix(n, "ram") && !strings.HasPrefix(n, "zram") {
			s.disks[n] = true
		}
	}
	return s
}

// Sample returns the node's usage and that of each running container with
// a PID and an instance label. A container whose files cannot be read (it
// just stopped) is left out; a node file that cannot be read is an error.
func (s *UsageSampler) Sample(containers []runtime.ContainerStatus) (*api.NodeUsage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	u := &api.NodeUsage{SampledAt: now.Unix()}
	var err error
	if u.ResourceUsage, err = s.node(now); err != nil {
		return nil, err
	}
	seen := map[string]bool{"": true}
	for _, c := range containers {
		inst := c.Labels[runtime.LabelInstance]
		if c.State != runtime.StateRunning || c.Pid <= 0 || inst == "" {
			continue
		}
		r, err := s.container(c.ID, c.Pid, now)
		if err != nil {
			delete(s.cgroups, c.ID)
			continue
		}
		seen[c.ID] = true
		u.Containers = append(u.Containers, api.ContainerUsage{Namespace: c.Labels[runtime.LabelNamespace],
			Workload: c.Labels[runtime.LabelWorkload], InstanceID: inst, ResourceUsage: r})
	}
	for id := range s.last {
		if !seen[id] {
			delete(s.last, id)
			delete(s.cgroups, id)
		}
	}
	return u, nil
}

// cpuRate turns a CPU counter into millicores since the previous one of
// key, and remembers it.
func (s *UsageSampler) cpuRate(key string, ns int64, now time.Time) int64 {
	prev, ok := s.last[key]
	s.last[key] = cpuMark{ns: ns, at: now}
	wall := now.Sub(prev.at)
	if !ok || wall <= 0 || ns < prev.ns {
		return 0
	}
	return (ns - prev.ns) * 1000 / wall.Nanoseconds()
}

// node reads the node's counters.
func (s *UsageSampler) node(now time.Time) (api.ResourceUsage, error) {
	var r api.ResourceUsage
	b, err := os.ReadFile(filepath.Join(s.proc, "stat"))
	if err != nil {
		return r, fmt.Errorf("sample node cpu: %w", err)
	}
	busy, err := busyCPUTicks(b)
	if err != nil {
		return r, err
	}
	// USER_HZ is 100 on every Linux: a tick is 10 ms.
	r.CPUMillis = s.cpuRate("", busy*int64(10*time.Millisecond), now)
	if b, err = os.ReadFile(filepath.Join(s.proc, "meminfo")); err != nil {
		return r, fmt.Errorf("sample node memory: %w", err)
	}
	total, avail := meminfoKB(b, "MemTotal:"), meminfoKB(b, "MemAvailable:")
	r.MemoryBytes = (total - avail) << 10
	if b, err = os.ReadFile(filepath.Join(s.proc, "diskstats")); err != nil {
		return r, fmt.Errorf("sample node disks: %w", err)
	}
	r.DiskReadBytes, r.DiskWriteBytes = diskstatsBytes(b, s.disks)
	if b, err = os.ReadFile(filepath.Join(s.proc, "net", "dev")); err != nil {
		return r, fmt.Errorf("sample node network: %w", err)
	}
	r.NetworkRxBytes, r.NetworkTxBytes = netDevBytes(b)
	return r, nil
}

// container reads one container's counters.
func (s *UsageSampler) container(id string, pid int, now time.Time) (api.ResourceUsage, error) {
	var r api.ResourceUsage
	cg, ok := s.cgroups[id]
	if !ok || cg.pid != pid {
		var err error
		if cg, err = s.cgroupOf(pid); err != nil {
			return r, err
		}
		s.cgroups[id] = cg
	}
	b, err := os.ReadFile(cg.cpu)
	if err != nil {
		return r, err
	}
	ns, err := cgroupCPUNanos(b, cg.v2)
	if err != nil {
		return r, fmt.Errorf("%s: %w", cg.cpu, err)
	}
	r.CPUMillis = s.cpuRate(id, ns, now)
	if b, err = os.ReadFile(cg.memory); err != nil {
		return r, err
	}
	if r.MemoryBytes, err = strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err != nil {
		return r, fmt.Errorf("%s: %w", cg.memory, err)
	}
	if b, err = os.ReadFile(cg.io); err != nil {
		return r, err
	}
	r.DiskReadBytes, r.DiskWriteBytes = cgroupIOBytes(b, cg.v2)
	if b, err = os.ReadFile(filepath.Join(s.proc, strconv.Itoa(pid), "net", "dev")); err != nil {
		return r, err
	}
	r.NetworkRxBytes, r.NetworkTxBytes = netDevBytes(b)
	return r, nil
}

// cgroupOf finds the cgroup files of process pid from /proc/PID/cgroup:
// cgroup v1's controllers where it has them, else v2's unified hierarchy.
func (s *UsageSampler) cgroupOf(pid int) (containerCgroup, error) {
	b, err := os.ReadFile(filepath.Join(s.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return containerCgroup{}, err
	}
	v1 := map[string]string{}
	var unified string
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			unified = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			// The hierarchy is mounted under the name of its
			// controllers ("cpu,cpuacct" with both).
			v1[c] = filepath.Join(s.cgroupRoot, f[1], f[2])
		}
	}
	if v1["cpuacct"] != "" && v1["memory"] != "" && v1["blkio"] != "" {
		return containerCgroup{pid: pid, cpu: filepath.Join(v1["cpuacct"], "cpuacct.usage"),
			memory: filepath.Join(v1["memory"], "memory.usage_in_bytes"),
			io:     filepath.Join(v1["blkio"], "blkio.throttle.io_service_bytes")}, nil
	}
	if unified == "" {
		return containerCgroup{}, fmt.Errorf("process %d: no cgroup with cpu, memory and io counters", pid)
	}
	dir := filepath.Join(s.cgroupRoot, unified)
	return containerCgroup{pid: pid, v2: true, cpu: filepath.Join(dir, "cpu.stat"),
		memory: filepath.Join(dir, "memory.current"), io: filepath.Join(dir, "io.stat")}, nil
}

// busyCPUTicks sums /proc/stat's first line but idle and iowait.
func busyCPUTicks(stat []byte) (int64, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, fmt.Errorf("sample node cpu: unexpected /proc/stat line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("sample node cpu: /proc/stat field %d: %w", i+1, err)
		}
		// idle, iowait; guest and guest_nice (9, 10) are in user already.
		if i != 3 && i != 4 && i < 8 {
			busy += n
		}
	}
	return busy, nil
}

// meminfoKB returns one /proc/meminfo value in kB, 0 when absent.
func meminfoKB(b []byte, key string) int64 {
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// diskstatsBytes sums the sectors read and written of the disks in
// /proc/diskstats, in bytes (a sector is 512 bytes there).
func diskstatsBytes(b []byte, disks map[string]bool) (read, written int64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || !disks[f[2]] {
			continue
		}
		r, _ := strconv.ParseInt(f[5], 10, 64)
		w, _ := strconv.ParseInt(f[9], 10, 64)
		read, written = read+r*512, written+w*512
	}
	return read, written
}

// netDevBytes sums the bytes received and sent of /proc/net/dev's
// interfaces but lo.
func netDevBytes(b []byte) (rx, tx int64) {
	for line := range strings.Lines(string(b)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, _ := strconv.ParseInt(f[0], 10, 64)
		t, _ := strconv.ParseInt(f[8], 10, 64)
		rx, tx = rx+r, tx+t
	}
	return rx, tx
}

// cgroupCPUNanos reads a cgroup's CPU time in nanoseconds: v1's
// cpuacct.usage, or v2's cpu.stat usage_usec.
func cgroupCPUNanos(b []byte, v2 bool) (int64, error) {
	if !v2 {
		return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return us * 1000, err
		}
	}
	return 0, fmt.Errorf("no usage_usec")
}

// cgroupIOBytes sums a cgroup's bytes read and written over its devices:
// v1's blkio.throttle.io_service_bytes ("8:0 Read 4096"), or v2's io.stat
// ("8:0 rbytes=4096 wbytes=0 ...").
func cgroupIOBytes(b []byte, v2 bool) (read, written int64) {
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if !v2 {
			if len(f) == 3 {
				n, _ := strconv.ParseInt(f[2], 10, 64)
				switch f[1] {
				case "Read":
					read += n
				case "Write":
					written += n
				}
			}
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "rbytes":
				read += n
			case "wbytes":
				written += n
			}
		}
	}
	return read, written
}

// publishUsage hands a sample to the node's metrics: the node's usage and
// each workload's, its containers summed.
func publishUsage(node string, u *api.NodeUsage) {
	toMetrics := func(r api.ResourceUsage) metrics.Usage {
		return metrics.Usage{CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes, DiskReadBytes: r.DiskReadBytes,
			DiskWriteBytes: r.DiskWriteBytes, NetworkRxBytes: r.NetworkRxBytes, NetworkTxBytes: r.NetworkTxBytes}
	}
	workloads := map[metrics.WorkloadKey]metrics.Usage{}
	for _, c := range u.Containers {
		k := metrics.WorkloadKey{Namespace: c.Namespace, Name: c.Workload}
		w, add := workloads[k], toMetrics(c.ResourceUsage)
		workloads[k] = metrics.Usage{CPUMillis: w.CPUMillis + add.CPUMillis, MemoryBytes: w.MemoryBytes + add.MemoryBytes,
			DiskReadBytes: w.DiskReadBytes + add.DiskReadBytes, DiskWriteBytes: w.DiskWriteBytes + add.DiskWriteBytes,
			NetworkRxBytes: w.NetworkRxBytes + add.NetworkRxBytes, NetworkTxBytes: w.NetworkTxBytes + add.NetworkTxBytes}
	}
	metrics.SetUsage(node, toMetrics(u.ResourceUsage), workloads)
}
