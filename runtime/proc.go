package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"kat.dws.rip/kat/internal/poll"
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

// containerProcs returns the live processes under procDir of the container
// whose full ID is id: those in its cgroup (podman names it libpod-ID, or
// libpod-ID.scope with the systemd cgroup manager), which are its own
// processes and its exec sessions', and, apart, the conmon processes that
// monitor it or its exec sessions (conmon -c ID). Not the podman processes
// that clean up after it (in conmon's cgroup, libpod-conmon-ID.scope with
// systemd). Zombies hold nothing and are left out.
func containerProcs(procDir, id string) (procs, conmons []int, err error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, nil, fmt.Errorf("list processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil {
			continue // gone meanwhile
		}
		inCgroup := bytes.Contains(cgroup, []byte("/libpod-"+id))
		if !inCgroup && !isConmonOf(dir, id) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil || zombie(stat) {
			continue
		}
		if inCgroup {
			procs = append(procs, pid)
		} else {
			conmons = append(conmons, pid)
		}
	}
	return procs, conmons, nil
}

// isConmonOf reports whether the process in dir is a conmon monitoring
// container id (its -c or --cid argument).
func isConmonOf(dir, id string) bool {
	comm, err := os.ReadFile(filepath.Join(dir, "comm"))
	if err != nil || string(bytes.TrimSpace(comm)) != "conmon" {
		return false
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return false
	}
	args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
	for i, a := range args {
		switch {
		case (string(a) == "-c" || string(a) == "--cid") && i+1 < len(args) && string(args[i+1]) == id,
			string(a) == "--cid="+id:
			return true
		}
	}
	return false
}

// zombie reports whether a /proc/PID/stat line is a zombie's (state Z).
func zombie(stat []byte) bool {
	// The state follows the command name, which is in parentheses and may
	// itself hold ") ".
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// ContainerProcesses returns the processes of the container whose full ID
// is id that run on this host: those of its cgroup (its own and its exec
// sessions') and, apart, the conmon processes that monitor it.
func ContainerProcesses(id string) (procs, conmons []int, err error) {
	return containerProcs(procRoot, id)
}

// KillLeftovers kills what is left of the container whose full ID is id,
// which Podman no longer has: when processes of its cgroup still run, it
// kills them and its conmons and waits until none is left, or ctx ends. It
// returns the processes it found, none when the cgroup was empty.
// StopAndRemoveContainer and RemoveContainer do it themselves.
func KillLeftovers(ctx context.Context, id string) ([]int, error) {
	return killLeftovers(ctx, procRoot, id)
}

// killLeftovers kills what is left of container id under procDir once
// podman no longer has it: when processes of its cgroup still run, it
// kills them and its conmons (SIGKILL) and waits until none is left, or ctx
// ends. It returns the processes it found then, none when the cgroup was
// empty: a conmon alone is one finishing its work (it runs podman's cleanup
// after the container ended) and goes by itself.
func killLeftovers(ctx context.Context, procDir, id string) ([]int, error) {
	procs, conmons, err := containerProcs(procDir, id)
	if err != nil || len(procs) == 0 {
		return nil, err
	}
	found := slices.Concat(procs, conmons)
	left := found
	err = poll.Wait(ctx, func() (bool, error) {
		for _, pid := range left {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return false, fmt.Errorf("kill process %d: %w", pid, err)
			}
		}
		procs, conmons, err := containerProcs(procDir, id)
		left = slices.Concat(procs, conmons) // one forked meanwhile is killed next time
		return err == nil && len(left) == 0, err
	})
	if err != nil {
		return found, fmt.Errorf("%d processes still run (%v): %w", len(left), left, err)
	}
	return found, nil
}
