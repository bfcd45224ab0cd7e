package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// nodeNameLabel is the label every node carries with its own name; the
// table leaves it out.
const nodeNameLabel = "kat.dws.rip/nodeName"

// Defaults of katcall drain --wait.
const (
	defaultDrainTimeout = 5 * time.Minute
	defaultDrainPoll    = 2 * time.Second
)

func newNodeActionCommand(g *globals, verb, short, done string, act func(*apiclient.Client, context.Context, string) (*api.Node, error)) *cobra.Command {
	return &cobra.Command{
		Use:               verb + " NODE",
		Short:             short,
		Args:              exactArgs(1, "NODE"),
		ValidArgsFunction: completeArg(g, 0, "nodes"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if _, err := act(c, cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "node %s %s\n", args[0], done)
			return nil
		},
	}
}

// exactArgs is cobra.ExactArgs with a message naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs { return countArgs(n, n, names) }

// minArgs is cobra.MinimumNArgs with a message naming the arguments.
func minArgs(n int, names string) cobra.PositionalArgs { return countArgs(n, -1, names) }

// countArgs accepts from lo to hi arguments (hi < 0: no limit).
func countArgs(lo, hi int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || (hi >= 0 && len(args) > hi) {
			return fmt.Errorf("%s: want %s, got %d arguments", cmd.Name(), names, len(args))
		}
		return nil
	}
}

type drainOptions struct {
	wait    bool
	timeout time.Duration
	poll    time.Duration
}

func newDrainCommand(g *globals) *cobra.Command {
	o := &drainOptions{}
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Cordon a node and move its Service and DaemonService instances off it; Job instances finish",
		Long: `drain marks NODE unschedulable and draining: the leader places no new instance on it,
moves its Service and DaemonService instances to other nodes and lets its running Job
instances finish. With --wait it reports progress until nothing is left, and fails when
--timeout passes first (the drain itself goes on). katcall uncordon ends a drain.`,
		Args:              exactArgs(1, "NODE"),
		ValidArgsFunction: completeArg(g, 0, "nodes"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.timeout <= 0 {
				return fmt.Errorf("--timeout: %s must be positive", o.timeout)
			}
			if o.poll <= 0 {
				return fmt.Errorf("--poll-interval: %s must be positive", o.poll)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if _, err := c.DrainNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "node %s draining\n", args[0])
			if !o.wait {
				return nil
			}
			return waitDrained(cmd.Context(), c, g, args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until no Service or DaemonService instance is on the node and its Job instances ended")
	cmd.Flags().DurationVar(&o.timeout, "timeout", defaultDrainTimeout, "with --wait, how long to wait before failing")
	cmd.Flags().DurationVar(&o.poll, "poll-interval", defaultDrainPoll, "with --wait, how often to check the node")
	_ = cmd.Flags().MarkHidden("poll-interval")
	return cmd
}

// waitDrained polls node until it has no active instance, printing a line
// each time what is left changes, and fails when o.timeout passes first.
func waitDrained(ctx context.Context, c *apiclient.Client, g *globals, node string, o *drainOptions) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tick := time.NewTicker(o.poll)
	defer tick.Stop()
	last := ""
	for {
		n, err := c.GetNode(ctx, node)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("check node %s: %w", node, err)
		}
		if err == nil {
			if drainLeft(n) == 0 {
				fmt.Fprintf(g.stdout, "node %s drained\n", node)
				return nil
			}
			if line := drainProgress(n); line != last {
				fmt.Fprintln(g.stdout, line)
				last = line
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				msg := fmt.Sprintf("node %s: not drained after --timeout %s", node, o.timeout)
				if last != "" {
					msg += " (" + strings.TrimPrefix(last, "node "+node+": ") + ")"
				}
				return &exitError{code: 1, msg: "error: " + msg + "; the drain goes on: see katcall get node " + node + ", or end it with katcall uncordon " + node}
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func drainLeft(n *api.Node) int {
	total := 0
	for _, c := range n.Active {
		total += c
	}
	return total
}

// drainProgress is a line such as "node n2: 3 instances left (2 Service,
// 1 Job)".
func drainProgress(n *api.Node) string {
	order := []string{"Service", "DaemonService", "Job"}
	for _, t := range slices.Sorted(maps.Keys(n.Active)) {
		if !slices.Contains(order, t) {
			order = append(order, t)
		}
	}
	var parts []string
	for _, t := range order {
		if c := n.Active[t]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, t))
		}
	}
	left := drainLeft(n)
	noun := "instances"
	if left == 1 {
		noun = "instance"
	}
	return fmt.Sprintf("node %s: %d %s left (%s)", n.Name, left, noun, strings.Join(parts, ", "))
}

func newLabelCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "label node NODE KEY=VALUE... | KEY-...",
		Short:             "Set (KEY=VALUE) or remove (KEY-) a node's labels",
		Args:              minArgs(3, "node NODE KEY=VALUE... or KEY-..."),
		ValidArgsFunction: completeKindThenName(g, "node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runNodeChange(cmd.Context(), g, "label", args, parseLabelArgs, (*apiclient.Client).LabelNode)
		},
	}
}

// runNodeChange runs `katcall VERB node NODE ARG...`: it parses the ARGs
// into a change and sends it with send.
func runNodeChange[T any](ctx context.Context, g *globals, verb string, args []string, parse func([]string) (T, error),
	send func(*apiclient.Client, context.Context, string, T) (*api.Node, error)) error {
	kind, err := resourceKind(args[0])
	if err != nil || kind != "nodes" {
		return fmt.Errorf("%s: %q: only nodes can be given %ss here (workloads take theirs from their Quadlet files)", verb, args[0], verb)
	}
	change, err := parse(args[2:])
	if err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	if _, err := send(c, ctx, args[1], change); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "node %s %sed\n", args[1], verb)
	return nil
}

// parseLabelArgs reads KEY=VALUE (set) and KEY- (remove) arguments.
func parseLabelArgs(args []string) (map[string]*string, error) {
	change := map[string]*string{}
	for _, a := range args {
		var key string
		var value *string
		if k, v, ok := strings.Cut(a, "="); ok {
			key, value = k, &v
		} else if k, ok := strings.CutSuffix(a, "-"); ok {
			key = k
		} else {
			return nil, fmt.Errorf("label %q: want KEY=VALUE to set a label or KEY- to remove it", a)
		}
		if key == "" {
			return nil, fmt.Errorf("label %q: the key is empty", a)
		}
		if _, dup := change[key]; dup {
			return nil, fmt.Errorf("label %q: key %s is given twice", a, key)
		}
		change[key] = value
	}
	return change, nil
}

func newTaintCommand(g *globals) *cobra.Command {
	var overwrite bool
	cmd := &cobra.Command{
		Use:   "taint node NODE KEY[=VALUE]:EFFECT... | KEY[:EFFECT]-...",
		Short: "Add or remove a node's taints (EFFECT: NoSchedule or PreferNoSchedule)",
		Long: `taint adds KEY[=VALUE]:EFFECT taints to a node and removes KEY:EFFECT- (that taint) or
KEY- (every taint of KEY), as kubectl taint does. NoSchedule keeps instances that do not
tolerate the taint off the node; PreferNoSchedule places them there only when no other
node fits. Adding a taint whose key and effect the node has already needs --overwrite.`,
		Args:              minArgs(3, "node NODE KEY[=VALUE]:EFFECT... or KEY[:EFFECT]-..."),
		ValidArgsFunction: completeKindThenName(g, "node"),
		RunE: func(cmd *cobra.Command, args []string) error {
			parse := func(args []string) (api.TaintChange, error) {
				change, err := parseTaintArgs(args)
				change.Overwrite = overwrite
				return change, err
			}
			return runNodeChange(cmd.Context(), g, "taint", args, parse, (*apiclient.Client).TaintNode)
		},
	}
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace a taint of the same key and effect")
	return cmd
}

var taintEffects = []string{"NoSchedule", "PreferNoSchedule"}

// parseTaintArgs reads KEY[=VALUE]:EFFECT (add), KEY:EFFECT- and KEY-
// (remove) arguments.
func parseTaintArgs(args []string) (api.TaintChange, error) {
	var change api.TaintChange
	usage := "want KEY[=VALUE]:EFFECT to add a taint, KEY:EFFECT- or KEY- to remove one (EFFECT: NoSchedule or PreferNoSchedule)"
	for _, a := range args {
		spec, remove := strings.CutSuffix(a, "-")
		var t api.Taint
		keyValue, effect, hasEffect := strings.Cut(spec, ":")
		t.Key, t.Effect = keyValue, effect
		if !remove {
			k, v, _ := strings.Cut(keyValue, "=")
			t.Key, t.Value = k, v
			if !hasEffect {
				return change, fmt.Errorf("taint %q: no effect: %s", a, usage)
			}
		} else if strings.Contains(keyValue, "=") {
			return change, fmt.Errorf("taint %q: a taint is removed by KEY:EFFECT- or KEY-, without its value", a)
		}
		if t.Key == "" {
			return change, fmt.Errorf("taint %q: the key is empty: %s", a, usage)
		}
		if (hasEffect || !remove) && !slices.Contains(taintEffects, t.Effect) {
			return change, fmt.Errorf("taint %q: effect %q must be NoSchedule or PreferNoSchedule", a, t.Effect)
		}
		if remove {
			change.Remove = append(change.Remove, t)
		} else {
			change.Add = append(change.Add, t)
		}
	}
	return change, nil
}

func newTokenCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage the cluster's join token",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate",
		Short: "Issue a new join token; the old one stops working at once",
		Long: `rotate issues a new join token, prints it and rewrites the leader's DATA_DIR/join.token.
Nodes that have joined are not affected; a node that joins from now on needs the new token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			tok, err := c.RotateJoinToken(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, tok)
			fmt.Fprintln(g.stderr, "the previous join token no longer works; give this one to kat-agent join --token-file")
			return nil
		},
	})
	return cmd
}

func nodeTable(g *globals, nodes []api.Node, now time.Time) error {
	t := newTable(g.stdout, "NAME", "STATUS", "ROLE", "LABELS", "TAINTS", "ALLOCATABLE", "REQUESTED", "INSTANCES", "HEARTBEAT")
	for _, n := range nodes {
		role := "agent"
		switch {
		case n.Leader:
			role = "leader"
		case n.EtcdMember:
			role = "member"
		}
		hb := "-"
		if n.HeartbeatAgeSeconds != nil {
			hb = age(now, now.Add(-time.Duration(*n.HeartbeatAgeSeconds)*time.Second))
		}
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
			if k != nodeNameLabel {
				labels = append(labels, k+"="+n.Labels[k])
			}
		}
		var taints []string
		for _, tn := range n.Taints {
			taints = append(taints, tn.String())
		}
		alloc := orDash(n.Resources.Allocatable.CPU) + "/" + orDash(n.Resources.Allocatable.Memory)
		req := formatMillis(n.Requested.CPUMillis) + "/" + formatBytes(n.Requested.MemoryBytes)
		if n.Requested.GPUs > 0 {
			req += fmt.Sprintf(" gpu:%d", n.Requested.GPUs)
		}
		t.row(n.Name, n.StatusText(), role, orDash(strings.Join(labels, ",")), orDash(strings.Join(taints, ",")),
			alloc, req, fmt.Sprint(n.Instances), hb)
	}
	return t.flush()
}

// formatMillis renders CPU millicores as a quantity: "2", "1500m".
func formatMillis(m int64) string {
	if m%1000 == 0 {
		return fmt.Sprint(m / 1000)
	}
	return fmt.Sprintf("%dm", m)
}

// formatBytes renders bytes as a quantity in the largest binary unit that
// divides it: "4Gi", "256Mi", "1000".
func formatBytes(b int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b != 0 && b%u.size == 0 {
			return fmt.Sprintf("%d%s", b/u.size, u.suffix)
		}
	}
	return fmt.Sprint(b)
}
