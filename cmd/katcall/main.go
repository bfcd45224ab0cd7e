// Command katcall is KAT's command-line client. See "katcall --help".
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes katcall with args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, g := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if rerr := g.refreshServers(ctx); rerr != nil {
		fmt.Fprintln(stderr, "warning:", rerr)
	}
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exitError); ok {
		if ee.msg != "" {
			fmt.Fprintln(stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "error:", describe(err))
	return 1
}

// exitError ends katcall with a code and an already-formatted message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
