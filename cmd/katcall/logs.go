package main

import (
	"errors"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/apiclient"
)

// newLogsCommand is katcall logs: the output of a workload's instances, or
// a build's log, which the leader reads from the nodes through their agent
// API.
func newLogsCommand(g *globals) *cobra.Command {
	var (
		q       apiclient.LogQuery
		isBuild bool
		commit  string
	)
	cmd := &cobra.Command{
		Use:               "logs NAMESPACE/NAME",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "Print the output of every instance of a workload (each line prefixed with its instance), of one with --instance, or with --build its build log",
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			if isBuild {
				for _, fl := range []string{"instance", "all", "follow", "tail", "since", "timestamps", "previous"} {
					if cmd.Flags().Changed(fl) {
						return errors.New("--" + fl + ": --build does not take it")
					}
				}
			}
			if commit != "" && !isBuild {
				return errors.New("--commit needs --build")
			}
			if q.All && q.Instance != "" {
				return errors.New("--all: every instance, or the one --instance names: not both")
			}
			if q.Tail < 0 {
				return errors.New("--tail: must not be negative")
			}
			if q.Previous && q.Follow {
				return errors.New("--previous: the previous run has ended: it cannot be followed (drop --follow)")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if isBuild {
				return c.BuildLog(cmd.Context(), ns, name, commit, g.stdout)
			}
			q.All = q.Instance == ""
			return c.LogsMatching(cmd.Context(), ns, name, q, g.stdout)
		},
	}
	cmd.Flags().StringVar(&q.Instance, "instance", "", "only this instance (see katcall status NAMESPACE/NAME)")
	cmd.Flags().BoolVar(&q.All, "all", false, "every instance at once, each line prefixed with [INSTANCE] (the default without --instance)")
	cmd.Flags().BoolVarP(&q.Follow, "follow", "f", false, "keep streaming new output, across restarts, and (without --instance) from new instances")
	cmd.Flags().IntVar(&q.Tail, "tail", 0, "only the last N lines of each instance (default: all)")
	cmd.Flags().StringVar(&q.Since, "since", "", "only output since this time (RFC 3339) or for this long (10m, 2h)")
	cmd.Flags().BoolVar(&q.Timestamps, "timestamps", false, "prefix each line with the time it was written")
	cmd.Flags().BoolVarP(&q.Previous, "previous", "p", false, "the output of the container's previous run (before its last restart)")
	cmd.Flags().BoolVar(&isBuild, "build", false, "print the log of the workload's image build instead (from the node that built it)")
	cmd.Flags().StringVar(&commit, "commit", "", "with --build: the app commit (7 to 40 hex digits; default: the one in the workload's status)")
	return cmd
}
