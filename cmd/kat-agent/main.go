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

	"kat.dws.rip/kat/build/usernsrun"
	"kat.dws.rip/kat/reconcile/agent"
)

// ExitDeparted is kat-agent's exit status once its node departed (SIGUSR1):
// the systemd units do not restart it (RestartPreventExitStatus).
const ExitDeparted = 10

func main() {
	// Builds run their RUN steps through this program (see package
	// build/usernsrun).
	usernsrun.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{
		Use:           "kat-agent",
		Short:         "KAT node agent and leader",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newInitCommand(), newJoinCommand())
	root.AddCommand(newRestoreCommand())
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kat-agent:", err)
		if errors.Is(err, agent.ErrDeparted) {
			os.Exit(ExitDeparted)
		}
		os.Exit(1)
	}
}
