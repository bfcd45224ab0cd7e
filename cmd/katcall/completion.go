package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Shell completion of resource names: cobra's completion command
// (katcall completion bash|zsh|fish|powershell) asks these, through the
// hidden __complete command, for the names the cluster has now. A cluster
// that cannot be reached completes nothing rather than file names.

// completeTimeout bounds the API call behind one completion: a shell waits
// for it.
const completeTimeout = 3 * time.Second

// names lists the names of kind the cluster has (workloads as
// NAMESPACE/NAME), nil when it cannot be reached.
func (g *globals) names(ctx context.Context, kind string) []string {
	c, err := g.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	var out []string
	switch kind {
	case "workloads":
		ws, _ := c.ListWorkloads(ctx, "")
		for _, w := range ws {
			out = append(out, w.Namespace+"/"+w.Name)
		}
	case "nodes":
		ns, _ := c.ListNodes(ctx)
		for _, n := range ns {
			out = append(out, n.Name)
		}
	case "namespaces":
		ns, _ := c.ListNamespaces(ctx)
		for _, n := range ns {
			out = append(out, n.Name)
		}
	case "sources":
		ss, _ := c.ListSources(ctx)
		for _, s := range ss {
			out = append(out, s.Spec.Name)
		}
	case "certificates":
		cs, _ := c.ListIngressCertificates(ctx)
		for _, v := range cs {
			out = append(out, v.Kind+"/"+v.Name)
		}
	}
	return out
}

// withPrefix keeps the names that start with what the user typed.
func withPrefix(names []string, typed string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, typed) {
			out = append(out, n)
		}
	}
	return out
}

// completeArg completes the argument at position pos with names of kind;
// other positions get nothing.
func completeArg(g *globals, pos int, kind string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, typed string) ([]string, cobra.ShellCompDirective) {
		if len(args) != pos {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return withPrefix(g.names(cmd.Context(), kind), typed), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeKindThenName completes a resource kind first (of kinds), then a
// name of that kind: get and delete.
func completeKindThenName(g *globals, kinds ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, typed string) ([]string, cobra.ShellCompDirective) {
		switch len(args) {
		case 0:
			return withPrefix(kinds, typed), cobra.ShellCompDirectiveNoFileComp
		case 1:
			kind, err := resourceKind(args[0])
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return withPrefix(g.names(cmd.Context(), kind), typed), cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
}
