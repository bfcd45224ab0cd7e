package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// Exit codes of katcall rollout status and apply --wait.
const (
	exitRolloutFailed   = 1
	exitRolloutTimedOut = 2
)

// rolloutPollInterval is how often a wait asks for the rollout's progress.
const rolloutPollInterval = 500 * time.Millisecond

func newHistoryCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "history NAMESPACE/NAME [-o table|json|yaml]",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "List a workload's generations and how each rollout ended",
		Long: `history lists the generations of a workload the leader keeps in its archive, oldest first:
the spec hash, the config repo commit they came from, when they were applied, and the
outcome of their rollout: succeeded, failed, rolled back, superseded (a newer generation
came before it ended) or in progress.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseFormat(output)
			if err != nil {
				return err
			}
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			h, err := c.WorkloadHistory(cmd.Context(), ns, name)
			if err != nil {
				return err
			}
			if f != formatTable {
				return printData(g.stdout, f, h)
			}
			t := newTable(g.stdout, "GENERATION", "SPEC", "COMMIT", "APPLIED", "OUTCOME", "NOTE")
			for _, e := range h {
				note := ""
				if rb := e.Rollback; rb != nil {
					note = fmt.Sprintf("rollback of %d to %d's files", rb.From, rb.To)
					if rb.Auto {
						note = "automatic " + note
					}
				}
				t.row(strconv.FormatInt(e.Generation, 10), short(e.SpecHash), orDash(short(e.Owner.Commit)),
					e.UpdatedAt.Local().Format(time.DateTime), e.Outcome, note)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func newRollbackCommand(g *globals) *cobra.Command {
	root := &cobra.Command{Use: "rollback workload NAMESPACE/NAME [--to-generation G]", Short: "Roll a workload back to an earlier generation"}
	var to int64
	wl := &cobra.Command{
		Use:               "workload NAMESPACE/NAME [--to-generation G]",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "Apply an earlier generation's files again as a new generation",
		Long: `rollback workload applies the archived Quadlet files of the previous generation whose
rollout succeeded (or of generation G) again, as a new generation rolled out with the
workload's update strategy. A Git-managed workload's Git management is suspended, as
apply --force does, so the next sync does not undo it; katcall resume hands it back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to < 0 {
				return errors.New("--to-generation: must be a generation (from 1)")
			}
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.RollbackWorkload(cmd.Context(), ns, name, to)
			if err != nil {
				return err
			}
			msg := fmt.Sprintf("workload %s/%s rolled back from generation %d to generation %d's files (generation %d)",
				ns, name, res.From, res.To, res.Workload.Generation)
			if res.GitSuspended {
				msg += "; Git management suspended, resume it with katcall resume"
			}
			fmt.Fprintln(g.stdout, msg)
			return nil
		},
	}
	wl.Flags().Int64Var(&to, "to-generation", 0, "generation to go back to (default: the previous one that rolled out successfully)")
	root.AddCommand(wl)
	return root
}

func newRolloutCommand(g *globals) *cobra.Command {
	root := &cobra.Command{Use: "rollout status NAMESPACE/NAME", Short: "Watch a workload's rollout"}
	var timeout time.Duration
	var gen int64
	st := &cobra.Command{
		Use:               "status NAMESPACE/NAME [--generation G] [--timeout 10m]",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "Print a rollout's progress until it ends",
		Long: `rollout status prints the progress of the workload's current generation (or of
generation G): new and old instances, ready of desired, and per node for a DaemonService,
until the rollout ends. It exits 0 when the rollout succeeded, 1 when it failed, was
rolled back or was superseded, and 2 when --timeout passed first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := workloadRef(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return waitRollout(cmd.Context(), c, g, ns, name, gen, timeout)
		},
	}
	st.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up (exit 2) after this long")
	st.Flags().Int64Var(&gen, "generation", 0, "generation to watch (default: the current one)")
	root.AddCommand(st)
	return root
}

// waitRollout prints the rollout of workload ns/name's generation gen (0:
// the current one) whenever its progress changes, until it ends or timeout
// passes.
func waitRollout(ctx context.Context, c *apiclient.Client, g *globals, ns, name string, gen int64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		st, err := c.WorkloadRollout(ctx, ns, name, gen)
		switch {
		case ctx.Err() != nil:
			return &exitError{code: exitRolloutTimedOut, msg: fmt.Sprintf("workload %s/%s: the rollout of generation %d did not end within %s",
				ns, name, gen, timeout)}
		case err != nil:
			return err
		}
		gen = st.Asked
		if line := rolloutProgress(st); line != last {
			fmt.Fprintln(g.stdout, line)
			last = line
		}
		switch st.Outcome {
		case api.OutcomeSucceeded:
			fmt.Fprintf(g.stdout, "workload %s/%s: generation %d successfully rolled out\n", ns, name, gen)
			return nil
		case api.OutcomeFailed, api.OutcomeRolledBack, api.OutcomeSuperseded:
			msg := fmt.Sprintf("workload %s/%s: the rollout of generation %d %s", ns, name, gen, st.Outcome)
			if fl := st.Rollout.Failure; fl != nil && fl.Generation == gen {
				msg += ": " + fl.Message
			}
			if st.Outcome == api.OutcomeSuperseded || st.Outcome == api.OutcomeRolledBack {
				msg += fmt.Sprintf(" (the current generation is %d)", st.Generation)
			}
			return &exitError{code: exitRolloutFailed, msg: msg}
		}
		select {
		case <-ctx.Done():
		case <-time.After(rolloutPollInterval):
		}
	}
}

// rolloutProgress renders a rollout's progress in one line, plus one per
// node of a DaemonService.
func rolloutProgress(st *api.RolloutStatus) string {
	ro := st.Rollout
	if ro.Generation != st.Asked {
		return fmt.Sprintf("generation %d: waiting for the leader to plan it", st.Asked)
	}
	c := ro.Counts
	s := fmt.Sprintf("generation %d: new %d/%d ready (%d placed), old %d (%d ready)", ro.Generation, c.NewReady, c.Desired, c.New, c.Old, c.OldReady)
	if c.Leaving > 0 {
		s += fmt.Sprintf(", %d leaving", c.Leaving)
	}
	var b strings.Builder
	b.WriteString(s)
	steps := map[string]api.DaemonRolloutNode{}
	if d := st.Daemon; d != nil && d.TargetGeneration == ro.Generation {
		for _, n := range d.Nodes {
			steps[n.Node] = n
		}
	}
	for _, n := range ro.Nodes {
		fmt.Fprintf(&b, "\n  node %s: new %d/%d ready, old %d", n.Node, n.NewReady, n.New, n.Old)
		if step, ok := steps[n.Node]; ok {
			fmt.Fprintf(&b, ", %s", step.Step)
			if step.Message != "" {
				fmt.Fprintf(&b, " (%s)", firstLine(step.Message))
			}
		}
	}
	return b.String()
}
