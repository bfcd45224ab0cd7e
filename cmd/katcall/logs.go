package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newLogsCommand is katcall logs: an instance's output, or a build's log,
// which the leader reads from the node through its agent API.
func newLogsCommand(g *globals) *cobra.Command {
	var (
		instance string
		follow   bool
		isBuild  bool
		commit   string
	)
	cmd := &cobra.Command{
		Use:               "logs NAMESPACE/NAME",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "Print the output of one instance of a workload (the first one unless --instance), or with --build its build log",
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if isBuild {
				return c.BuildLog(cmd.Context(), ns, name, commit, g.stdout)
			}
			if commit != "" {
				return errors.New("--commit needs --build")
			}
			return c.Logs(cmd.Context(), ns, name, instance, follow, g.stdout)
		},
	}
	cmd.Flags().StringVar(&instance, "instance", "", "instance ID (see katcall status NAMESPACE/NAME)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep streaming new output")
	cmd.Flags().BoolVar(&isBuild, "build", false, "print the log of the workload's image build instead (from the node that built it)")
	cmd.Flags().StringVar(&commit, "commit", "", "with --build: the app commit (7 to 40 hex digits; default: the one in the workload's status)")
	return cmd
}
