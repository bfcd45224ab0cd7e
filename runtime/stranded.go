package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Rootful Podman binds every host port a container publishes itself and
// hands the listening socket to the container's conmon, which holds it for
// as long as the container runs and never accepts on it: netavark's port
// forwarding (DNAT) takes the connections to the container instead. For a
// container with a user namespace (every KAT container has one) Podman 4.3
// makes that bind before it sets the forwarding up, some 100-200 ms on a
// busy node, so a connection that comes in between is
// completed by the kernel into the held socket's queue and waits there for
// good: its client hangs until it gives up. Once a start has returned, the
// forwarding is in place and nothing new lands there, so the start resets
// what waits (resetStranded): those clients fail at once and can try again.

// resetStrandedAfterStart resets the connections stranded in the port
// reservations of container id, just started; it returns how many it reset.
// A container that publishes no port, or no longer runs, has none.
func (p *Podman) resetStrandedAfterStart(ctx context.Context, id string) (int, error) {
	e, err := p.inspectEntry(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("find the port reservations: %w", err)
	}
	st := e.status()
	if len(st.Ports) == 0 || e.State.ConmonPid <= 0 || st.State != StateRunning {
		return 0, nil
	}
	ports := make([]int, 0, len(st.Ports))
	for _, pm := range st.Ports {
		ports = append(ports, pm.HostPort)
	}
	n, err := resetStranded(e.State.ConmonPid, ports)
	if err != nil {
		return n, fmt.Errorf("reset connections stranded in the port reservations of container %s: %w", id, err)
	}
	return n, nil
}

// resetStranded resets (RST) every connection waiting to be accepted on
// the listening TCP sockets process pid holds for one of ports, and
// returns how many it reset. It takes copies of the process's sockets
// (pidfd_getfd(2)): the process keeps its own, and with them the ports. A
// process that is gone has none.
func resetStranded(pid int, ports []int) (int, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("open process %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list the files of process %d: %w", pid, err)
	}
	total := 0
	var errs []error
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || !strings.HasPrefix(target, "socket:") {
			continue // closed meanwhile, or no socket
		}
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pidfd, n, 0)
		if err != nil {
			if !errors.Is(err, unix.EBADF) && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("copy socket %d of process %d: %w", n, pid, err))
			}
			continue
		}
		reset, err := resetQueued(fd, ports)
		unix.Close(fd)
		total += reset
		if err != nil {
			errs = append(errs, fmt.Errorf("socket %d of process %d: %w", n, pid, err))
		}
	}
	return total, errors.Join(errs...)
}

// resetQueued accepts, and closes with a reset, every connection queued on
// fd when it is a listening TCP socket bound to one of ports; other
// sockets it leaves alone.
func resetQueued(fd int, ports []int) (int, error) {
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return 0, nil
	}
	if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 1 {
		return 0, nil
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return 0, nil
	}
	port := 0
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	}
	if !slices.Contains(ports, port) {
		return 0, nil
	}
	// Never block. The flag is shared with the holder's descriptor; the
	// holder never accepts on it, so it may stay.
	if err := unix.SetNonblock(fd, true); err != nil {
		return 0, fmt.Errorf("make the socket of port %d non-blocking: %w", port, err)
	}
	n := 0
	for {
		c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EAGAIN) {
			return n, nil
		}
		if errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("accept a connection stranded on port %d: %w", port, err)
		}
		// Linger 0: the close sends a reset, the client fails at once.
		lerr := unix.SetsockoptLinger(c, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		unix.Close(c)
		if lerr != nil {
			return n, fmt.Errorf("reset a connection stranded on port %d: %w", port, lerr)
		}
		n++
	}
}
