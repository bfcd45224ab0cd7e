package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newDeleteCommand(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:               "delete workload NAMESPACE/NAME | delete namespace NAME | delete node NAME | delete certificate KIND/NAME",
		Short:             "Delete a workload, an empty namespace, a node or an ingress certificate",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeKindThenName(g, "workload", "namespace", "node", "certificate"),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := resourceKind(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			switch kind {
			case "workloads":
				ns, name, ok := strings.Cut(args[1], "/")
				if !ok || ns == "" || name == "" {
					return fmt.Errorf("workload %q: want NAMESPACE/NAME", args[1])
				}
				w, err := c.DeleteWorkload(cmd.Context(), ns, name, force)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "workload %s/%s deleted (was generation %d)\n", w.Namespace, w.Name, w.Generation)
			case "namespaces":
				if err := c.DeleteNamespace(cmd.Context(), args[1]); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "namespace %s deleted\n", args[1])
			case "nodes":
				if err := c.DeleteNode(cmd.Context(), args[1], force); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "node %s deleted; its name can join again\n", args[1])
			case "sources":
				if err := c.DeleteSource(cmd.Context(), args[1]); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "source %s deleted\n", args[1])
			case "certificates":
				return deleteCertificate(cmd.Context(), c, g, args[1], force)
			default:
				return fmt.Errorf("%s cannot be deleted with katcall delete", kind)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete even a Git-managed workload, a Ready node that still has instances, or a certificate a route uses")
	return cmd
}
