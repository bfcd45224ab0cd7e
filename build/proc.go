package build

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// stopBuildContainers kills the processes of the containers that the
// podman process pid runs RUN steps in: its descendants in another PID
// namespace than ours. Killing podman alone would leave them running,
// reparented to init, and its working container in storage; with them
// gone, the RUN step fails and podman cleans up after itself. It reports
// whether there was any to kill.
func stopBuildContainers(procDir string, pid int) bool {
	self, err := os.Readlink(filepath.Join(procDir, "self", "ns", "pid"))
	if err != nil {
		return false
	}
	found := false
	for _, d := range descendants(procDir, pid) {
		ns, err := os.Readlink(filepath.Join(procDir, strconv.Itoa(d), "ns", "pid"))
		if err != nil || ns == self {
			continue
		}
		if err := syscall.Kill(d, syscall.SIGKILL); err == nil || errors.Is(err, syscall.ESRCH) {
			found = true
		}
	}
	return found
}

// descendants returns every process below pid, read from procDir.
func descendants(procDir string, pid int) []int {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name in parentheses may hold spaces: the parent
		// PID is the second field after the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
