package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ExecIO is where an interactive command (ExecInteractive) reads and
// writes.
type ExecIO struct {
	// Stdin, when set, is the command's standard input (podman exec -i);
	// its end closes the command's input. Default nil: none.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output. With TTY, all of it
	// comes on Stdout, as a terminal shows it.
	Stdout, Stderr io.Writer
	// TTY gives the command a terminal (podman exec -t).
	TTY bool
	// Resize, with TTY, carries the sizes of the caller's terminal.
	// Default nil: the terminal keeps its first size.
	Resize <-chan TermSize
}

// TermSize is the size of a terminal.
type TermSize struct{ Rows, Cols uint16 }

// ExecInteractive runs cmdline inside running container id with
// `podman exec` as eio asks (input, a terminal) until it exits or ctx
// ends, and returns its exit status: 125 to 127 are podman's and the
// shell's (no such container or command). When ctx ends first the command
// and its children are killed (as Exec's are). The goroutine reading
// eio.Stdin ends when it returns an error or EOF: the caller closes it.
func (p *Podman) ExecInteractive(ctx context.Context, id string, cmdline []string, eio ExecIO) (int, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	if len(cmdline) == 0 {
		return 0, fmt.Errorf("%w: exec command: is required", ErrInvalidSpec)
	}
	token := randomToken()
	args := []string{"exec", "--env", execTokenVar + "=" + token}
	if eio.Stdin != nil {
		args = append(args, "--interactive")
	}
	if eio.TTY {
		args = append(args, "--tty")
	}
	args = append(append(args, "--", id), cmdline...)
	cmd := p.command(ctx, args...)
	var wait func() error
	var err error
	if eio.TTY {
		wait, err = startOnTerminal(cmd, eio)
	} else {
		wait, err = startPiped(cmd, eio)
	}
	if err != nil {
		return 0, fmt.Errorf("exec %q in %s: %w", cmdline, id, p.commandError(ctx, args, err, nil))
	}
	err = wait()
	if ctx.Err() != nil {
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if kerr := p.killExec(killCtx, id, token); kerr != nil {
			return 0, fmt.Errorf("exec %q in %s: %w (and killing it failed: %w)", cmdline, id, ctx.Err(), kerr)
		}
		return 0, fmt.Errorf("exec %q in %s: %w", cmdline, id, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), nil
	case err != nil:
		return 0, fmt.Errorf("exec %q in %s: %w", cmdline, id, err)
	}
	return 0, nil
}

// startPiped starts cmd with pipes to eio and returns how to wait for it.
func startPiped(cmd *exec.Cmd, eio ExecIO) (func() error, error) {
	cmd.Stdout, cmd.Stderr = eio.Stdout, eio.Stderr
	var stdin io.WriteCloser
	if eio.Stdin != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if stdin != nil {
		go func() {
			_, _ = io.Copy(stdin, eio.Stdin)
			_ = stdin.Close()
		}()
	}
	return cmd.Wait, nil
}

// startOnTerminal starts cmd on a new pseudo-terminal, its controlling
// terminal in a session of its own (so a resize reaches podman as
// SIGWINCH), copying eio.Stdin to it and its output to eio.Stdout. The
// returned wait returns once cmd exited and its output is copied.
func startOnTerminal(cmd *exec.Cmd, eio ExecIO) (func() error, error) {
	ptm, pts, err := openPTY()
	if err != nil {
		return nil, err
	}
	if eio.Resize != nil {
		select { // the caller's first size, before podman reads it
		case s := <-eio.Resize:
			setSize(ptm, s)
		default:
		}
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	_ = pts.Close() // the child has its own
	if err != nil {
		_ = ptm.Close()
		return nil, err
	}
	var copied sync.WaitGroup
	copied.Go(func() {
		// Ends with EIO once every holder of the terminal exited.
		_, _ = io.Copy(eio.Stdout, ptm)
	})
	done := make(chan struct{})
	if eio.Stdin != nil {
		go func() { _, _ = io.Copy(ptm, eio.Stdin) }()
	}
	if eio.Resize != nil {
		go func() {
			for {
				select {
				case s, ok := <-eio.Resize:
					if !ok {
						return
					}
					setSize(ptm, s)
				case <-done:
					return
				}
			}
		}()
	}
	return func() error {
		err := cmd.Wait()
		copied.Wait()
		close(done)
		_ = ptm.Close()
		return err
	}, nil
}

// setSize sets the size of the terminal of ptm; the kernel tells its
// holders (SIGWINCH).
func setSize(ptm *os.File, s TermSize) {
	_ = unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: s.Rows, Col: s.Cols}) //nolint:gosec // an fd fits an int
}

// openPTY opens a new pseudo-terminal: its master and its slave.
func openPTY() (ptm, pts *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx") //nolint:gosec // an fd is never negative here
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		_ = ptm.Close()
		return nil, nil, fmt.Errorf("unlock a terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		_ = ptm.Close()
		return nil, nil, fmt.Errorf("name a terminal: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	pts, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = ptm.Close()
		return nil, nil, fmt.Errorf("open terminal %s: %w", name, err)
	}
	return ptm, pts, nil
}
