package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/node"
)

func newDepartCommand() *cobra.Command {
	var dataDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "depart [--data-dir DIR]",
		Short: "Make the kat-agent running on this machine leave the cluster for good",
		Long: `depart tells the kat-agent running with data directory DIR (through the unix socket
DIR/agent.sock) that its node leaves for good, as SIGUSR1 does, and waits until it has.

The agent tells the leader, which marks the node NotReady and Departed: the node's
Service instances are placed on other nodes at once, its DaemonService instances are
removed, and its Job instances are given up as on a lost node (the job's backoffLimit
decides whether they run again elsewhere). The agent waits until its Service and
DaemonService instances are no longer assigned to it and their containers are removed
(at most 2 minutes). An etcd member then leaves the etcd quorum, unless the members left
would have no quorum of running members (or it is the only one): it stays a member then,
and says so. The agent then exits with status 10, which the systemd units do not restart.

depart prints the agent's progress and exits 0 once the node departed, 1 when no agent
answers or the departure failed. A node that departed is Ready again when its agent
starts again; one that left the etcd quorum joins again from an empty data directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout: %s is not a positive duration", timeout)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return node.RequestDeparture(ctx, dataDir, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", "/var/lib/kat", "data directory of the running kat-agent")
	f.DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the departure to end")
	return cmd
}
