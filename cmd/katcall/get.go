package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

type getOptions struct {
	namespace string
	output    string
	audit     auditFlags
	events    eventFlags
}

func newGetCommand(g *globals) *cobra.Command {
	o := &getOptions{}
	cmd := &cobra.Command{
		Use:               "get workloads|namespaces|nodes|sources|secrets|events|jobs|ingress|certificates|audit [NAME]",
		Short:             "List workloads, namespaces, nodes, Git sources, secrets (never their values), recent events, the runs of Jobs, the ingress routes (NAME: a host), the ingress certificates (never their keys) or the audit log",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKindThenName(g, "workloads", "namespaces", "nodes", "sources", "secrets", "events", "jobs", "ingress", "certificates", "audit"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseFormat(o.output)
			if err != nil {
				return err
			}
			kind, err := resourceKind(args[0])
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			q, err := o.audit.query(cmd, kind, name, o.namespace)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if kind == "audit" {
				return runGetAudit(cmd.Context(), c, g, q, f)
			}
			if kind == "events" {
				eq, err := o.events.query(name, o.namespace, o.audit.limit)
				if err != nil {
					return err
				}
				return runGetEvents(cmd.Context(), c, g, eq, o.events.watch, f)
			}
			if err := o.events.refuse(cmd); err != nil {
				return err
			}
			return runGet(cmd.Context(), c, g, kind, name, o.namespace, f)
		},
	}
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "only this namespace (default: all)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	o.audit.register(cmd)
	o.events.register(cmd)
	return cmd
}

// resourceKind accepts singular, plural and short names.
func resourceKind(s string) (string, error) {
	switch s {
	case "workloads", "workload", "wl":
		return "workloads", nil
	case "namespaces", "namespace", "ns":
		return "namespaces", nil
	case "nodes", "node", "no":
		return "nodes", nil
	case "sources", "source", "src":
		return "sources", nil
	case "secrets", "secret":
		return "secrets", nil
	case "events", "event", "ev":
		return "events", nil
	case "jobs", "job", "runs":
		return "jobs", nil
	case "ingress", "ingresses", "ing":
		return "ingress", nil
	case "certificates", "certificate", "certs", "cert":
		return "certificates", nil
	case "audit":
		return "audit", nil
	}
	return "", fmt.Errorf("unknown resource type %q: want workloads, namespaces, nodes, sources, secrets, events, jobs, ingress, certificates or audit", s)
}

func runGet(ctx context.Context, c *apiclient.Client, g *globals, kind, name, ns string, f outputFormat) error {
	now := time.Now()
	switch kind {
	case "sources":
		return runGetSources(ctx, c, g, name, f)
	case "secrets":
		return runGetSecrets(ctx, c, g, name, ns, f, now)
	case "jobs":
		return runGetJobs(ctx, c, g, name, ns, f, now)
	case "ingress":
		return runGetIngress(ctx, c, g, name, f, now)
	case "certificates":
		return runGetCertificates(ctx, c, g, name, f, now)
	case "workloads":
		ws, err := c.ListWorkloads(ctx, ns)
		if err != nil {
			return err
		}
		if name != "" {
			ws = filter(ws, func(w api.Workload) bool { return w.Name == name })
			if len(ws) == 0 {
				return fmt.Errorf("workload %q not found", name)
			}
		}
		if f != formatTable {
			return printData(g.stdout, f, ws)
		}
		return workloadTable(g, ws, now)
	case "namespaces":
		nss, err := c.ListNamespaces(ctx)
		if err != nil {
			return err
		}
		if name != "" {
			nss = filter(nss, func(n api.NamespaceView) bool { return n.Name == name })
			if len(nss) == 0 {
				return fmt.Errorf("namespace %q not found", name)
			}
		}
		if f != formatTable {
			return printData(g.stdout, f, nss)
		}
		t := newTable(g.stdout, "NAME", "WORKLOADS", "AGE")
		for _, n := range nss {
			t.row(n.Name, fmt.Sprint(n.Workloads), age(now, n.CreatedAt))
		}
		return t.flush()
	default:
		nodes, err := c.ListNodes(ctx)
		if err != nil {
			return err
		}
		if name != "" {
			nodes = filter(nodes, func(n api.Node) bool { return n.Name == name })
			if len(nodes) == 0 {
				return fmt.Errorf("node %q not found", name)
			}
		}
		if f != formatTable {
			return printData(g.stdout, f, nodes)
		}
		return nodeTable(g, nodes, now)
	}
}

func workloadTable(g *globals, ws []api.Workload, now time.Time) error {
	t := newTable(g.stdout, "NAMESPACE", "NAME", "TYPE", "GEN", "PHASE", "READY", "OWNER", "NODE", "AGE")
	for _, w := range ws {
		t.row(w.Namespace, w.Name, w.Type, fmt.Sprint(w.Generation), orDash(w.Status.Phase),
			readyLabel(w.Status), ownerLabel(w), orDash(w.PinnedNode), age(now, w.CreatedAt))
	}
	return t.flush()
}

func ownerLabel(w api.Workload) string {
	o := w.Owner.Kind
	if w.Owner.Kind == "git" {
		o = "git:" + w.Owner.Source + "/" + w.Owner.Path
	}
	if w.Suspended {
		o += " (suspended)"
	}
	return o
}

func filter[T any](in []T, keep func(T) bool) []T {
	var out []T
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}
