package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

func newSourceCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "source set|delete NAME",
		Short: "Add, change or delete a Git source the leader follows",
	}
	cmd.AddCommand(newSourceSetCommand(g), &cobra.Command{
		Use:               "delete NAME",
		ValidArgsFunction: completeArg(g, 0, "sources"),
		Short:             "Stop following a Git source (its workloads stay, still owned by it)",
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSource(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "source %s deleted\n", args[0])
			return nil
		},
	})
	return cmd
}

func newSourceSetCommand(g *globals) *cobra.Command {
	var (
		spec     api.SourceSpec
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:               "set NAME --repo URL [--branch B] [--path P] [--interval 30s] ...",
		ValidArgsFunction: completeArg(g, 0, "sources"),
		Short:             "Create a Git source, or change the given fields of an existing one",
		Long: `set creates or changes a Git source. For an existing source only the flags given
change; the others keep their values. Credential flags name files on the leader
node; the credentials themselves never leave it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur := api.SourceSpec{Name: args[0]}
			if src, err := c.GetSource(ctx, args[0]); err == nil {
				cur = src.Spec
			} else if !isNotFound(err) {
				return err
			} else if !cmd.Flags().Changed("repo") {
				return fmt.Errorf("--repo: required for a new source")
			}
			f := cmd.Flags()
			set := func(name string, dst *string, v string) {
				if f.Changed(name) {
					*dst = v
				}
			}
			set("repo", &cur.URL, spec.URL)
			set("branch", &cur.Branch, spec.Branch)
			set("path", &cur.Path, spec.Path)
			set("token-file", &cur.Auth.TokenFile, spec.Auth.TokenFile)
			set("username", &cur.Auth.Username, spec.Auth.Username)
			set("basic-auth-file", &cur.Auth.BasicAuthFile, spec.Auth.BasicAuthFile)
			set("ssh-key-file", &cur.Auth.SSHKeyFile, spec.Auth.SSHKeyFile)
			set("known-hosts-file", &cur.Auth.KnownHostsFile, spec.Auth.KnownHostsFile)
			set("keyring-file", &cur.KeyringFile, spec.KeyringFile)
			if f.Changed("interval") {
				if interval%time.Second != 0 || interval <= 0 {
					return fmt.Errorf("--interval: %s must be a whole number of seconds", interval)
				}
				cur.IntervalSeconds = int(interval / time.Second)
			}
			if f.Changed("allow-prune-all") {
				cur.AllowPruneAll = spec.AllowPruneAll
			}
			src, err := c.PutSource(ctx, cur)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "source %s set: %s branch %s path %s every %ds\n", src.Spec.Name, src.Spec.URL,
				src.Spec.Branch, src.Spec.Path, src.Spec.IntervalSeconds)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.URL, "repo", "", "repository URL: https://, http://, ssh:// or file:// (required for a new source)")
	f.StringVar(&spec.Branch, "branch", "", "branch to follow (default main)")
	f.StringVar(&spec.Path, "path", "", "directory of the repository holding the workloads (default .)")
	f.DurationVar(&interval, "interval", 0, "poll interval, at least 5s (default 30s)")
	f.StringVar(&spec.Auth.TokenFile, "token-file", "", "file on the leader holding an access token (sent as HTTP basic password)")
	f.StringVar(&spec.Auth.Username, "username", "", "HTTP user sent with --token-file (default x-access-token), or SSH user (default git)")
	f.StringVar(&spec.Auth.BasicAuthFile, "basic-auth-file", "", "file on the leader holding user:password")
	f.StringVar(&spec.Auth.SSHKeyFile, "ssh-key-file", "", "private key file on the leader, for ssh:// URLs")
	f.StringVar(&spec.Auth.KnownHostsFile, "known-hosts-file", "", "known_hosts file on the leader, required with --ssh-key-file")
	f.StringVar(&spec.KeyringFile, "keyring-file", "", "armored PGP public keyring on the leader: only commits signed by its keys are applied")
	f.BoolVar(&spec.AllowPruneAll, "allow-prune-all", false, "let a commit delete every workload of the source")
	return cmd
}

func isNotFound(err error) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound
}

func newSyncCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "sync [SOURCE]",
		ValidArgsFunction: completeArg(g, 0, "sources"),
		Short:             "Make the leader fetch a Git source (every source by default) now",
		Args:              cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Sync(cmd.Context(), name)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "sync requested for %d source(s); watch it with katcall get sources\n", res.Triggered)
			return nil
		},
	}
}

func newSuspendCommand(g *globals, suspend bool) *cobra.Command {
	use, short := "resume NAMESPACE/NAME", "Hand a workload back to Git management (Git's version is applied again)"
	if suspend {
		use, short = "suspend NAMESPACE/NAME", "Pause Git management of a workload"
	}
	return &cobra.Command{
		Use:               use,
		ValidArgsFunction: completeArg(g, 0, "workloads"),
		Short:             short,
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, ok := strings.Cut(args[0], "/")
			if !ok || ns == "" || name == "" {
				return fmt.Errorf("workload %q: want NAMESPACE/NAME", args[0])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if suspend {
				if _, err := c.SuspendWorkload(cmd.Context(), ns, name); err != nil {
					return err
				}
				fmt.Fprintf(g.stdout, "workload %s/%s: Git management suspended\n", ns, name)
				return nil
			}
			if _, err := c.ResumeWorkload(cmd.Context(), ns, name); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "workload %s/%s: Git management resumed; Git's version is applied on the sync started now\n", ns, name)
			return nil
		},
	}
}

func runGetSources(ctx context.Context, c *apiclient.Client, g *globals, name string, f outputFormat) error {
	srcs, err := c.ListSources(ctx)
	if err != nil {
		return err
	}
	if name != "" {
		srcs = filter(srcs, func(s api.Source) bool { return s.Spec.Name == name })
		if len(srcs) == 0 {
			return fmt.Errorf("source %q not found", name)
		}
	}
	if f != formatTable {
		return printData(g.stdout, f, srcs)
	}
	return sourceTable(g, srcs, time.Now())
}

func sourceTable(g *globals, srcs []api.Source, now time.Time) error {
	t := newTable(g.stdout, "SOURCE", "URL", "BRANCH", "PATH", "FETCHED", "APPLIED", "WORKLOADS", "READY", "LAST FETCH", "MESSAGE")
	var errs []string
	for _, s := range srcs {
		st := s.Status
		ready, msg := "-", ""
		for _, c := range st.Conditions {
			if c.Type == "Ready" {
				ready, msg = c.Status, c.Message
			}
		}
		if st.LastError != "" {
			msg = st.LastError
		}
		fetched := "-"
		if !st.LastFetchTime.IsZero() {
			fetched = age(now, st.LastFetchTime) + " ago"
		}
		t.row(s.Spec.Name, s.Spec.URL, s.Spec.Branch, s.Spec.Path, orDash(api.ShortCommit(st.FetchedCommit)), orDash(api.ShortCommit(st.AppliedCommit)),
			fmt.Sprint(st.Workloads), ready, fetched, orDash(oneLine(msg)))
		for _, e := range st.PathErrors {
			errs = append(errs, fmt.Sprintf("  %s: %s", s.Spec.Name, oneLine(e.Error)))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(errs) > 0 {
		fmt.Fprintln(g.stdout, "Path errors (these directories keep their last good version):")
		for _, e := range errs {
			fmt.Fprintln(g.stdout, e)
		}
	}
	return nil
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }
