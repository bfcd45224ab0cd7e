package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

func newStatusCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "status [NAMESPACE/NAME]",
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             "Summarise the cluster (leader, nodes, namespaces, workloads), or one workload with its instances",
		Args:              cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseFormat(output)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return runWorkloadStatus(cmd.Context(), c, g, args[0], f)
			}
			return runStatus(cmd.Context(), c, g, f)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func runStatus(ctx context.Context, c *apiclient.Client, g *globals, f outputFormat) error {
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if f != formatTable {
		return printData(g.stdout, f, st)
	}
	now := time.Now()
	w := g.stdout
	fmt.Fprintf(w, "Cluster:    %s (%s)\n", st.Cluster.Name, st.Cluster.UID)
	if st.Leader != nil {
		fmt.Fprintf(w, "Leader:     %s at %s, since %s ago\n", st.Leader.Node, st.Leader.APIURL, age(now, st.Leader.Since))
	} else {
		fmt.Fprintln(w, "Leader:     none")
	}
	if d := st.Detached; d != nil {
		fmt.Fprintf(w, "Detached:   node %s, detached from cluster %s (%s) since %s ago; workloads applied here run on it only\n",
			d.Node, d.ParentCluster, d.ParentClusterUID, age(now, d.Since))
		if d.RejoinError != "" {
			fmt.Fprintf(w, "Rejoin:     last tried %s ago: %s\n", age(now, d.LastRejoinAttempt), d.RejoinError)
		}
		if d.StartFailures > 0 {
			fmt.Fprintf(w, "Plane:      started after %d failed attempts; the last: %s\n", d.StartFailures, d.LastStartError)
		}
	}
	ready := 0
	for _, n := range st.Nodes {
		if n.Status == api.NodeReady {
			ready++
		}
	}
	fmt.Fprintf(w, "Nodes:      %d/%d ready\n", ready, len(st.Nodes))
	names := make([]string, 0, len(st.Namespaces))
	for _, ns := range st.Namespaces {
		names = append(names, ns.Name)
	}
	fmt.Fprintf(w, "Namespaces: %d (%s)\n", len(st.Namespaces), strings.Join(names, ", "))
	fmt.Fprintf(w, "Workloads:  %d%s\n", len(st.Workloads), phaseSummary(st.Phases))
	fmt.Fprintf(w, "Backup:     %s\n", backupLine(st.Backup, now))
	if len(st.Nodes) > 0 {
		fmt.Fprintln(w)
		if err := nodeTable(g, st.Nodes, now); err != nil {
			return err
		}
		if err := ingressNodeTable(g, st.Nodes, now); err != nil {
			return err
		}
	}
	if len(st.Sources) > 0 {
		fmt.Fprintln(w)
		if err := sourceTable(g, st.Sources, now); err != nil {
			return err
		}
	}
	if len(st.Workloads) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "WORKLOAD", "TYPE", "GEN", "APPLIED", "PHASE", "READY", "CONDITIONS", "OWNER", "LAST ERROR")
		for _, wl := range st.Workloads {
			t.row(wl.Namespace+"/"+wl.Name, wl.Type, fmt.Sprint(wl.Generation), appliedLabel(wl.Status.AppliedGeneration),
				orDash(wl.Status.Phase), readyLabel(wl.Status), conditionsLabel(wl.Status.Conditions),
				ownerLabel(wl), orDash(firstLine(wl.Status.LastError)))
		}
		return t.flush()
	}
	return nil
}

// appliedLabel is the generation the ready instances run, "-" for none.
func appliedLabel(gen int64) string {
	if gen == 0 {
		return "-"
	}
	return fmt.Sprint(gen)
}

// readyLabel is "ready/desired", with the instances no node could take:
// "1/3 (2 pending)".
func readyLabel(st api.WorkloadStatus) string {
	s := fmt.Sprintf("%d/%d", st.Ready, st.Desired)
	if st.Unplaced > 0 {
		s += fmt.Sprintf(" (%d pending)", st.Unplaced)
	}
	return s
}

// conditionsLabel lists the conditions that need attention, Ready aside:
// those that hold (Stalled, BuildFailed, Reconciling) and SourceResolved or
// Scheduled when false, as Type or Type:Reason.
func conditionsLabel(cs []api.Condition) string {
	var out []string
	for _, c := range cs {
		bad := c.Type != "Ready" && (c.Status == api.ConditionTrue ||
			((c.Type == "SourceResolved" || c.Type == "Scheduled") && c.Status == api.ConditionFalse))
		if !bad {
			continue
		}
		if c.Reason != "" && c.Reason != c.Type {
			out = append(out, c.Type+":"+c.Reason)
		} else {
			out = append(out, c.Type)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func phaseSummary(phases map[string]int) string {
	if len(phases) == 0 {
		return ""
	}
	keys := make([]string, 0, len(phases))
	for k := range phases {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", phases[k], orDash(k)))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// ingressNodeTable lists the nodes labelled kat.dws.rip/role=ingress and
// those running an ingress proxy: what their proxy applied and its last
// error. Nothing without any.
func ingressNodeTable(g *globals, nodes []api.Node, now time.Time) error {
	var rows []api.Node
	for _, n := range nodes {
		if n.Ingress != nil || n.Labels[ingressRoleLabel] == "ingress" {
			rows = append(rows, n)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(g.stdout)
	t := newTable(g.stdout, "INGRESS NODE", "PROXY", "ROUTES", "BACKENDS", "APPLIED", "ERROR")
	for _, n := range rows {
		in := n.Ingress
		if in == nil {
			t.row(n.Name, "no proxy instance", "-", "-", "-", "-")
			continue
		}
		applied := "-"
		if !in.LastAppliedAt.IsZero() {
			applied = age(now, in.LastAppliedAt) + " ago"
		}
		t.row(n.Name, in.Proxy, fmt.Sprint(in.Routes), fmt.Sprint(in.Backends), applied, orDash(firstLine(in.LastError)))
	}
	return t.flush()
}

// ingressRoleLabel is the node label of ingress nodes, which the ingress
// recipe's nodeSelector names.
const ingressRoleLabel = "kat.dws.rip/role"
