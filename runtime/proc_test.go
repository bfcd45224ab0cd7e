package runtime

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestContainerProcs: a container's processes are those in its cgroup
// (cgroupfs's libpod-ID or systemd's libpod-ID.scope) and its conmons are
// those whose -c names it; not another container's, not the podman that
// cleans up after it in conmon's cgroup, not a zombie.
func TestContainerProcs(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const other = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
	proc := t.TempDir()
	for _, p := range []struct {
		pid, comm, state, cgroup string
		args                     []string
	}{
		{pid: "10", comm: "httpd", state: "S", cgroup: "8:pids:/libpod_parent/libpod-" + id + "\n1:cpu:/libpod_parent/libpod-" + id},
		{pid: "11", comm: "sh", state: "R", cgroup: "0::/machine.slice/libpod-" + id + ".scope/container"},
		{pid: "12", comm: "sleep", state: "Z", cgroup: "8:pids:/libpod_parent/libpod-" + id},
		{pid: "13", comm: "httpd", state: "S", cgroup: "8:pids:/libpod_parent/libpod-" + other},
		{pid: "20", comm: "conmon", state: "S", cgroup: "8:pids:/libpod_parent/conmon", args: []string{"/usr/bin/conmon", "--api-version", "1", "-c", id, "-u", id}},
		{pid: "21", comm: "conmon", state: "S", cgroup: "8:pids:/libpod_parent/conmon", args: []string{"/usr/bin/conmon", "--cid=" + id, "-e"}},
		{pid: "22", comm: "conmon", state: "S", cgroup: "8:pids:/libpod_parent/conmon", args: []string{"/usr/bin/conmon", "-c", other, "--exit-command-arg", id}},
		{pid: "30", comm: "podman", state: "S", cgroup: "0::/machine.slice/libpod-conmon-" + id + ".scope", args: []string{"/usr/bin/podman", "container", "cleanup", id}},
	} {
		dir := filepath.Join(proc, p.pid)
		files := map[string]string{
			"comm":    p.comm + "\n",
			"stat":    p.pid + " (" + p.comm + ") " + p.state + " 1 1 1",
			"cgroup":  p.cgroup + "\n",
			"cmdline": strings.Join(p.args, "\x00") + "\x00",
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(proc, "uptime"), []byte("1 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	procs, conmons, err := containerProcs(proc, id)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(procs)
	slices.Sort(conmons)
	if !slices.Equal(procs, []int{10, 11}) || !slices.Equal(conmons, []int{20, 21}) {
		t.Errorf("processes %v, conmons %v; want [10 11] and [20 21]", procs, conmons)
	}
	// A conmon finishing its work after its container ended is left to
	// go by itself: nothing of the cgroup runs.
	found, err := killLeftovers(t.Context(), proc, other+"0")
	if err != nil || len(found) != 0 {
		t.Errorf("killLeftovers of a container with no process: %v, %v", found, err)
	}
}

func TestZombie(t *testing.T) {
	for stat, want := range map[string]bool{
		"12 (sleep) Z 1 1":   true,
		"12 (sleep) S 1 1":   false,
		"12 (a) Z (b) R 1 1": false, // the name holds ") Z"
		"12 (a) R (b) Z 1 1": true,
		"12 (truncated":      false,
		"12 (x) ":            false,
	} {
		if got := zombie([]byte(stat)); got != want {
			t.Errorf("zombie(%q) = %v, want %v", stat, got, want)
		}
	}
}

func TestIsFullID(t *testing.T) {
	for id, want := range map[string]bool{
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef": true,
		"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef": false,
		"0123456789abcdef": false,
		"kat-web-1":        false,
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdefa": false,
	} {
		if got := isFullID(id); got != want {
			t.Errorf("isFullID(%q) = %v, want %v", id, got, want)
		}
	}
}

// BenchmarkContainerProcs scans this host's /proc for a container's
// processes, as every removal does once podman has removed it.
func BenchmarkContainerProcs(b *testing.B) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	entries, _ := os.ReadDir(procRoot)
	b.ReportMetric(float64(len(entries)), "proc-entries")
	for b.Loop() {
		if _, _, err := containerProcs(procRoot, id); err != nil {
			b.Fatal(err)
		}
	}
}
