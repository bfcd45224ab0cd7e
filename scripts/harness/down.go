package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"kat.dws.rip/kat/internal/mountinfo"
	"kat.dws.rip/kat/internal/poll"
)

// StopTimeout is how long Down waits for the processes left in a host's
// namespace to exit after SIGTERM before it sends SIGKILL.
const StopTimeout = 10 * time.Second

// Down removes the harness recorded in stateDir: it stops the processes left
// in its namespaces (SIGTERM, then SIGKILL after StopTimeout), unmounts what
// is mounted below the host directories, deletes the namespaces, the veth
// pairs, the bridge and the iptables rules that exist of those Up planned,
// the host directories and the state file. Down of a state directory that
// records no harness does nothing, so Down is idempotent; when a step fails
// it still tries the others and keeps the state file for another try.
func Down(ctx context.Context, stateDir string) error {
	c, err := Load(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return c.down(ctx)
}

// Down removes the harness c; see the function Down.
func (c *Cluster) Down(ctx context.Context) error { return c.down(ctx) }

func (c *Cluster) down(ctx context.Context) error {
	var errs []error
	// Each host's processes wait for their own StopTimeout: all at once.
	if err := forEachHost(c.Hosts, func(h Host) error {
		if err := stopProcesses(ctx, h); err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
		return nil
	}); err != nil {
		errs = append(errs, err)
	}
	for _, h := range c.Hosts {
		// A killed kat-agent leaves its WireGuard UAPI socket behind
		// (the next start would replace it).
		if h.WGIface != "" {
			if err := os.Remove(filepath.Join("/var/run/wireguard", h.WGIface+".sock")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err))
			}
		}
		if err := mountinfo.UnmountBelow(h.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err))
		}
	}
	for _, h := range c.Hosts {
		if _, err := os.Lstat(h.NetnsPath()); err == nil {
			if err := run(ctx, "ip", "netns", "delete", h.Netns); err != nil {
				errs = append(errs, fmt.Errorf("harness %s: %w", c.Name, err))
			}
		}
		// Deleting the namespace deletes the pair unless a process still
		// holds the namespace; deleting this end deletes it anyway.
		if err := deleteLink(ctx, h.VethHost); err != nil {
			errs = append(errs, fmt.Errorf("harness %s: %w", c.Name, err))
		}
	}
	if err := deleteLink(ctx, c.Bridge); err != nil {
		errs = append(errs, fmt.Errorf("harness %s: %w", c.Name, err))
	}
	for _, r := range c.Rules {
		if err := deleteRule(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("harness %s: %w", c.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, h := range c.Hosts {
		if err := os.RemoveAll(h.Dir); err != nil {
			errs = append(errs, fmt.Errorf("harness %s: %w", c.Name, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := os.Remove(filepath.Join(c.StateDir, StateFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("harness %s: %w", c.Name, err)
	}
	if c.CreatedStateDir {
		// Only when empty: what else is there is not the harness's.
		_ = os.Remove(c.StateDir)
	}
	return nil
}

// forEachHost runs f for every host at once and returns their errors
// joined, in the hosts' order, once every f has returned.
func forEachHost(hosts []Host, f func(Host) error) error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { errs[i] = f(h) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deleteLink deletes the link name of the machine's network namespace if it
// is there. The kernel removes a veth whose peer's namespace was deleted in
// the background, so the link may vanish between the check and the delete.
func deleteLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	if err := run(ctx, "ip", "link", "delete", name); err != nil && linkExists(name) {
		return err
	}
	return nil
}

// deleteRule deletes r if it is there, once: Up inserted it once.
func deleteRule(ctx context.Context, r Rule) error {
	check := append([]string{"-w", "-t", r.Table, "-C", r.Chain}, r.Spec...)
	if err := run(ctx, "iptables", check...); err != nil {
		// iptables -C exits 1 for a missing rule (and for a missing chain,
		// which holds no rule of the harness either).
		return nil
	}
	return run(ctx, "iptables", append([]string{"-w", "-t", r.Table, "-D", r.Chain}, r.Spec...)...)
}

// stopProcesses ends the processes in h's namespace (those started with
// h.Command and their children that stayed there), and the nsenter processes
// on their way into it (see hostPids).
func stopProcesses(ctx context.Context, h Host) error {
	if _, err := os.Lstat(h.NetnsPath()); err != nil {
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		// A process found after the first round (one a caller started
		// meanwhile) gets sig too.
		signalled := map[int]bool{}
		signal := func() (done bool, err error) {
			ps, err := hostPids(h)
			for _, pid := range ps {
				if !signalled[pid] {
					_ = syscall.Kill(pid, sig)
					signalled[pid] = true
				}
			}
			return err == nil && len(ps) == 0, err
		}
		if done, err := signal(); done || err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, StopTimeout)
		err := poll.Wait(wctx, signal)
		cancel()
		if err == nil {
			return nil
		}
	}
	ps, _ := hostPids(h)
	return fmt.Errorf("processes %v are still in network namespace %s after SIGKILL", ps, h.Netns)
}

// hostPids returns the processes whose network namespace is h's, and the
// nsenter processes whose arguments name h's namespace: cmd.Start of
// h.Command returns once nsenter runs, before nsenter has entered the
// namespace (in about one start in ten on an idle machine, more under
// load). Such a process is in no scan by namespace (ip netns pids); when
// Down deleted the namespace after that scan, nsenter still entered it
// through the file it had opened and its program ran on in a namespace
// nobody could name any more.
func hostPids(h Host) ([]int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(h.NetnsPath(), &st); err != nil {
		return nil, fmt.Errorf("find processes in %s: %w", h.NetnsPath(), err)
	}
	netns := "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
	nsenterArg := "--net=" + h.NetnsPath()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("find processes in %s: %w", h.NetnsPath(), err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		// The command line first, then the namespace: an nsenter that
		// enters and execs between the two reads is then seen by the
		// second. (In the other order it would be in neither.) A process
		// that ended meanwhile is simply skipped.
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == "nsenter" && slices.Contains(args, nsenterArg) {
			pids = append(pids, pid)
			continue
		}
		if link, err := os.Readlink(filepath.Join(dir, "ns", "net")); err == nil && link == netns {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// lockFile serialises Up's choice of a subnet and names across the
// harnesses of one machine, in every process.
const lockFile = "/run/kat/harness.lock"

func lockMachine(ctx context.Context) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(lockFile), 0o755); err != nil {
		return nil, fmt.Errorf("harness: lock: %w", err)
	}
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("harness: lock: %w", err)
	}
	// Not a blocking flock: a harness whose holder hangs must not hang
	// every other one; ctx bounds the wait.
	err = poll.Wait(ctx, func() (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("harness: lock %s: %w", lockFile, err)
	}
	return func() { f.Close() }, nil
}
