// Command kat-agent is KAT's node binary: it runs on every node, and the node
// elected leader also serves the API. See "kat-agent init --help".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/build/usernsrun"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/reconcile/agent/containerspec"
)

// ExitDeparted is kat-agent's exit status once its node departed (SIGUSR1
// or kat-agent depart):
// the systemd units do not restart it (RestartPreventExitStatus).
const ExitDeparted = 10

func main() {
	// Builds run their RUN steps through this program (see package
	// build/usernsrun).
	usernsrun.Main()
	// Containers with secret environment variables start through this
	// program (see containerspec.ExecEnvMain).
	containerspec.ExecEnvMain()
	// A userspace WireGuard device runs in a process of this program of
	// its own (see netstack.DeviceMain).
	netstack.DeviceMain()
	// A core file of the leader or an agent could hold secrets' values.
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		fmt.Fprintln(os.Stderr, "kat-agent: disable core files:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "kat-agent",
		Short:         "KAT node agent and leader",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newInitCommand(), newJoinCommand())
	root.AddCommand(newRestoreCommand(), newDepartCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kat-agent:", err)
		if errors.Is(err, agent.ErrDeparted) {
			os.Exit(ExitDeparted)
		}
		os.Exit(1)
	}
}
