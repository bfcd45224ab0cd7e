package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// workloadRef splits NAMESPACE/NAME.
func workloadRef(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("workload %q: want NAMESPACE/NAME", s)
	}
	return ns, name, nil
}

// runWorkloadStatus shows one workload and its instances.
func runWorkloadStatus(ctx context.Context, c *apiclient.Client, g *globals, ref string, f outputFormat) error {
	ns, name, err := workloadRef(ref)
	if err != nil {
		return err
	}
	d, err := c.WorkloadStatus(ctx, ns, name)
	if err != nil {
		return err
	}
	if f != formatTable {
		return printData(g.stdout, f, d)
	}
	w := g.stdout
	st := d.Status
	fmt.Fprintf(w, "Workload:   %s/%s (%s, generation %d, observed %d, applied %s)\n", d.Namespace, d.Name, d.Type,
		d.Generation, st.ObservedGeneration, appliedLabel(st.AppliedGeneration))
	fmt.Fprintf(w, "Phase:      %s, %d/%d ready\n", orDash(st.Phase), st.Ready, st.Desired)
	if st.Unplaced > 0 {
		fmt.Fprintf(w, "Pending:    %d instances fit on no node: %s\n", st.Unplaced, st.UnplacedReason)
	}
	if st.LastRun != "" || st.NextRunTime != nil {
		next := "-"
		if st.NextRunTime != nil {
			next = st.NextRunTime.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "Runs:       last %s, next %s (katcall get jobs %s)\n", orDash(st.LastRun), next, d.Name)
	}
	if st.SourceCommit != "" {
		fmt.Fprintf(w, "Commit:     %s (app repository)\n", short(st.SourceCommit))
	}
	fmt.Fprint(w, reconcileLines(st, time.Now()))
	if st.LastError != "" {
		fmt.Fprintf(w, "Last error: %s\n", st.LastError)
	}
	for _, cond := range st.Conditions {
		fmt.Fprintf(w, "Condition:  %s=%s %s: %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
	}
	if err := printDaemonRollout(g, d.DaemonRollout); err != nil {
		return err
	}
	if len(d.Instances) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w, "INSTANCE", "NODE", "PHASE", "STATE", "HEALTH", "RESTARTS", "PORTS", "CONTAINER", "MESSAGE")
	for _, in := range d.Instances {
		var ports []string
		for _, p := range in.Status.Ports {
			ports = append(ports, fmt.Sprintf("%d->%d", p.HostPort, p.ContainerPort))
		}
		st := in.Status
		t.row(in.InstanceID, in.Node, st.Phase, orDash(st.State), orDash(st.HealthStatus), fmt.Sprint(st.Restarts),
			orDash(strings.Join(ports, ",")), orDash(short(st.ContainerID)), orDash(st.Message))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(d.Builds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	bt := newTable(w, "BUILD", "NODE", "STATE", "CACHE", "STARTED", "ERROR")
	for _, b := range d.Builds {
		cache := "miss"
		if b.CacheHit {
			cache = "hit"
		}
		bt.row(short(b.Commit), b.Node, string(b.State), cache, b.StartedAt.Local().Format("15:04:05"), orDash(firstLine(b.Error)))
	}
	return bt.flush()
}

// printDaemonRollout shows a DaemonService's node-by-node update: its
// phase and each node's step.
func printDaemonRollout(g *globals, r *api.DaemonRollout) error {
	if r == nil {
		return nil
	}
	w := g.stdout
	fmt.Fprintf(w, "\nRollout:    generation %d, %s, %d node(s) at a time, verify %s, started %s\n", r.TargetGeneration, r.Phase,
		r.MaxParallel, map[bool]string{true: "command", false: "none"}[r.Verify], r.StartedAt.Local().Format("15:04:05"))
	if r.Message != "" {
		fmt.Fprintf(w, "            %s\n", r.Message)
	}
	t := newTable(w, "NODE", "STEP", "FROM", "INSTANCE", "MESSAGE")
	for _, n := range r.Nodes {
		from := "-"
		if n.PreviousGeneration > 0 {
			from = fmt.Sprintf("generation %d", n.PreviousGeneration)
		}
		t.row(n.Node, n.Step, from, orDash(n.Instance), orDash(n.Message))
	}
	return t.flush()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func short(id string) string { return id[:min(len(id), 12)] }

// reconcileLines says when placement last changed the workload's instances,
// how many failed instances it replaced in a row, and when and why a failed
// instance is replaced next; "" when there is nothing to say.
func reconcileLines(st api.WorkloadStatus, now time.Time) string {
	var b strings.Builder
	if st.LastReconcileTime != nil {
		fmt.Fprintf(&b, "Reconciled: %s, %d failed instances replaced in a row\n",
			st.LastReconcileTime.Local().Format(time.RFC3339), st.Attempts)
	}
	if st.NextRetryTime != nil {
		in := "now"
		if d := st.NextRetryTime.Sub(now).Round(time.Second); d > 0 {
			in = "in " + d.String()
		}
		fmt.Fprintf(&b, "Next try:   %s (%s): %s\n", st.NextRetryTime.Local().Format(time.RFC3339), in, st.RetryReason)
	}
	return b.String()
}
