package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/frames"
)

// newExecCommand is katcall exec: a command run in an instance, on
// whichever node runs it, with its exit status as katcall's.
func newExecCommand(g *globals) *cobra.Command {
	var (
		instance   string
		stdin, tty bool
	)
	cmd := &cobra.Command{
		Use:   "exec NAMESPACE/NAME [--instance ID] [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in an instance of a workload (the first running one unless --instance); katcall exits with its status",
		Long: `Run a command in an instance of a workload, on whichever node runs it: the API
server passes the connection on to that node's agent. -i passes katcall's input
to the command, -t gives it a terminal (with -i, katcall's terminal is put in raw
mode while it runs). katcall exits with the command's exit status. The audit log
records who ran which command in which instance, never its output.`,
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Args:              cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			req := apiclient.ExecRequest{Instance: instance, Command: args[1:], Stdout: g.stdout, Stderr: g.stderr, TTY: tty}
			if stdin {
				req.Stdin = g.stdin
			}
			ctx := cmd.Context()
			if tty {
				restore, resize, err := terminal(ctx, stdin)
				if err != nil {
					return err
				}
				defer restore()
				req.Resize = resize
			}
			code, err := c.Exec(ctx, ns, name, req)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&instance, "instance", "", "the instance to run the command in (see katcall status NAMESPACE/NAME)")
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "pass katcall's input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	return cmd
}

// terminal prepares katcall's terminal for a command run on a terminal:
// with input passed, raw mode until restore; the terminal's size now and
// at each change. Without a terminal on stdin, it does nothing.
func terminal(ctx context.Context, input bool) (restore func(), sizes <-chan frames.Size, err error) {
	fd := int(os.Stdin.Fd()) //nolint:gosec // an fd fits an int
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}, nil, nil // not a terminal: nothing to set
	}
	restore = func() {}
	if input {
		raw := *old
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Oflag &^= unix.OPOST
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cflag &^= unix.CSIZE | unix.PARENB
		raw.Cflag |= unix.CS8
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
			return nil, nil, fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		restore = func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
	}
	ch := make(chan frames.Size, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	send := func() {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err != nil {
			return
		}
		select {
		case <-ch: // only the newest size matters
		default:
		}
		ch <- frames.Size{Rows: ws.Row, Cols: ws.Col}
	}
	send()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				send()
			}
		}
	}()
	prev := restore
	return func() {
		cancel()
		<-done
		signal.Stop(winch)
		prev()
	}, ch, nil
}
