package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killExec kills the processes of container id whose environment holds
// execTokenVar=token: the command of a timed-out Exec and its children. It
// looks in /proc for processes in the container's PID namespace.
func (p *Podman) killExec(ctx context.Context, id, token string) error {
	st, err := p.InspectContainer(ctx, id)
	if err != nil {
		return err
	}
	if st.Pid <= 0 {
		return nil // the container stopped: so did the command
	}
	return killMarked("/proc", st.Pid, []byte(execTokenVar+"="+token))
}

// killMarked sends SIGKILL to every process under procDir sharing init's
// PID namespace whose environment contains marker (a whole NAME=VALUE
// entry).
func killMarked(procDir string, init int, marker []byte) error {
	ns, err := os.Readlink(filepath.Join(procDir, strconv.Itoa(init), "ns", "pid"))
	if err != nil {
		return fmt.Errorf("read pid namespace of container process %d: %w", init, err)
	}
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return fmt.Errorf("list processes: %w", err)
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == init {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		if n, err := os.Readlink(filepath.Join(dir, "ns", "pid")); err != nil || n != ns {
			continue
		}
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil || !hasEnvEntry(env, marker) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill exec process %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func hasEnvEntry(environ, entry []byte) bool {
	for kv := range bytes.SplitSeq(environ, []byte{0}) {
		if bytes.Equal(kv, entry) {
			return true
		}
	}
	return false
}
