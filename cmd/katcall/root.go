package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/apiclient"
)

// globals are the flags every command shares.
type globals struct {
	configPath string
	stdout     io.Writer
	// stdin is katcall exec -i's input: os.Stdin.
	stdin  io.Reader
	stderr io.Writer
	// used is the API client the command made (client), and usedConfig
	// the file it came from: run refreshes the file's servers when the
	// client had to fail over.
	used       *apiclient.Client
	usedConfig string
}

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *globals) {
	g := &globals{stdout: stdout, stderr: stderr, stdin: os.Stdin}
	root := &cobra.Command{
		Use:   "katcall",
		Short: "Control a KAT cluster",
		Long: `katcall talks to a KAT cluster's API.

Configuration comes from --config, else $KATCONFIG, else ~/.kat/config; kat-agent init
writes one to DATA_DIR/katcall.yaml.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.configPath, "config", "", "katcall configuration file (default $KATCONFIG, then ~/.kat/config)")
	root.AddCommand(newApplyCommand(g), newGetCommand(g), newDeleteCommand(g), newStatusCommand(g))
	root.AddCommand(newSourceCommand(g), newSecretCommand(g), newSyncCommand(g), newSuspendCommand(g, true), newSuspendCommand(g, false))
	root.AddCommand(newDiffCommand(g))
	root.AddCommand(newBackupCommand(g))
	root.AddCommand(newLogsCommand(g), newExecCommand(g), newTopCommand(g))
	root.AddCommand(newHistoryCommand(g), newRollbackCommand(g), newRolloutCommand(g))
	root.AddCommand(
		newNodeActionCommand(g, "cordon", "Mark a node unschedulable: it gets no new instance", "cordoned", (*apiclient.Client).CordonNode),
		newNodeActionCommand(g, "uncordon", "Make a node schedulable again (ending a drain)", "uncordoned", (*apiclient.Client).UncordonNode),
		newDrainCommand(g), newLabelCommand(g), newTaintCommand(g), newTokenCommand(g), newMetricsCertCommand(g))
	return root, g
}
