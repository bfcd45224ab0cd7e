package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/quadlet"
)

// Exit codes of katcall diff, as diff(1) has them.
const (
	diffExitSame    = 0
	diffExitChanges = 1
	diffExitError   = 2
)

type diffOptions struct {
	path      string
	namespace string
}

func newDiffCommand(g *globals) *cobra.Command {
	o := &diffOptions{}
	cmd := &cobra.Command{
		Use:   "diff -f PATH",
		Short: "Show what applying Quadlet directories would change",
		Long: `diff compares PATH with the cluster and prints what "katcall apply -f PATH" would
change, without changing anything. PATH is what apply takes: a Quadlet directory, a
tar.gz of one, or a tree of them such as a config repo.

Each namespace and workload is shown as "+" (would be created), "~" (would change,
followed by a unified diff of its files against the cluster's) or "=" (unchanged: the
spec hashes are equal, so comment-only edits are unchanged).

Exit status: 0 when nothing would change, 1 when something would, 2 on an error
(an invalid Quadlet file is named with its file and line).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &exitError{code: diffExitError, msg: fmt.Sprintf("error: unexpected argument %q: use -f PATH", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.path == "" {
				return &exitError{code: diffExitError, msg: "error: -f: required: the Quadlet directory, archive or tree to compare"}
			}
			c, err := g.client()
			if err != nil {
				return &exitError{code: diffExitError, msg: "error: " + describe(err)}
			}
			return runDiff(cmd.Context(), c, g.stdout, g.stderr, o)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: diffExitError, msg: "error: " + err.Error()}
	})
	cmd.Flags().StringVarP(&o.path, "filename", "f", "", "Quadlet directory, tar.gz archive, or tree of them")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "namespace (default: metadata.namespace, else \"default\")")
	return cmd
}

// clusterView is what diff reads from the cluster; *apiclient.Client has it.
type clusterView interface {
	ListNamespaces(ctx context.Context) ([]api.NamespaceView, error)
	GetWorkload(ctx context.Context, ns, name string) (*api.Workload, error)
	GetWorkloadFile(ctx context.Context, ns, name, file string) ([]byte, error)
}

var _ clusterView = (*apiclient.Client)(nil)

// change says what applying one item would do.
type change byte

const (
	changeNone   change = '='
	changeCreate change = '+'
	changeUpdate change = '~'
)

func (c change) verb() string {
	switch c {
	case changeCreate:
		return "created"
	case changeUpdate:
		return "changed"
	}
	return "unchanged"
}

// compareWorkload decides what applying a workload of spec hash local does to
// the server's workload (nil when it does not exist).
func compareWorkload(local string, server *api.Workload) change {
	switch {
	case server == nil:
		return changeCreate
	case server.SpecHash != local:
		return changeUpdate
	}
	return changeNone
}

// compareNamespace decides what applying a namespace document does to the
// server's namespace (nil when it does not exist).
func compareNamespace(local *quadlet.Namespace, server *api.Namespace) change {
	switch {
	case server == nil:
		return changeCreate
	case !maps.Equal(local.Metadata.Labels, server.Labels):
		return changeUpdate
	}
	return changeNone
}

// fileDiffs returns the unified diffs turning the server's files into the
// local ones, file by file in name order; a file on one side only is diffed
// against nothing.
func fileDiffs(serverPrefix, localPrefix string, server, local map[string][]byte) string {
	names := slices.Sorted(maps.Keys(server))
	for name := range local {
		if _, ok := server[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		from, to := serverPrefix+"/"+name, localPrefix+"/"+name
		if _, ok := server[name]; !ok {
			from = "/dev/null"
		}
		if _, ok := local[name]; !ok {
			to = "/dev/null"
		}
		b.WriteString(unifiedDiff(from, to, server[name], local[name]))
	}
	return b.String()
}

// diffRun holds one diff's counts and output.
type diffRun struct {
	c       clusterView
	stdout  io.Writer
	stderr  io.Writer
	counts  map[change]int
	errs    int
	nsKnown map[string]bool // namespaces that exist or that PATH creates
}

// fail reports why item it could not be compared; a Quadlet problem is named
// by its path and line: DIR/FILE:LINE, or ARCHIVE: FILE:LINE.
func (d *diffRun) fail(it applyItem, err error) {
	d.errs++
	var list quadlet.ErrorList
	var fe *quadlet.FieldError
	switch {
	case errors.As(err, &list):
		for _, e := range list {
			fmt.Fprintf(d.stderr, "error: %s\n", fieldErrorAt(it, e))
		}
	case errors.As(err, &fe):
		fmt.Fprintf(d.stderr, "error: %s\n", fieldErrorAt(it, fe))
	default:
		fmt.Fprintf(d.stderr, "error: %s: %s\n", it.label, describe(err))
	}
}

func fieldErrorAt(it applyItem, fe *quadlet.FieldError) string {
	e := *fe
	switch {
	case e.File == "" || it.archive != "":
		return it.label + ": " + e.Error()
	case it.namespace != nil:
		e.File = it.label
	default:
		e.File = filepath.Join(it.dir, e.File)
	}
	return e.Error()
}

func runDiff(ctx context.Context, c clusterView, stdout, stderr io.Writer, o *diffOptions) error {
	items, err := collect(o.path)
	if err != nil {
		return &exitError{code: diffExitError, msg: "error: " + err.Error()}
	}
	d := &diffRun{c: c, stdout: stdout, stderr: stderr, counts: map[change]int{}, nsKnown: map[string]bool{}}
	existing, err := c.ListNamespaces(ctx)
	if err != nil {
		return &exitError{code: diffExitError, msg: "error: list namespaces: " + describe(err)}
	}
	byName := map[string]*api.Namespace{}
	for i := range existing {
		byName[existing[i].Name] = &existing[i].Namespace
		d.nsKnown[existing[i].Name] = true
	}
	seen := map[string]string{} // "ns/name" or "namespace name" -> label that defines it
	for _, it := range items {
		if it.namespace != nil {
			d.namespace(it, byName, seen)
		}
	}
	for _, it := range items {
		if it.namespace == nil {
			if err := d.workload(ctx, it, o.namespace, seen); err != nil {
				d.fail(it, err)
				if isConnectionError(err) {
					break
				}
			}
		}
	}
	fmt.Fprintf(stdout, "%d to create, %d to change, %d unchanged\n",
		d.counts[changeCreate], d.counts[changeUpdate], d.counts[changeNone])
	switch {
	case d.errs > 0:
		return &exitError{code: diffExitError, msg: fmt.Sprintf("%d item(s) could not be compared", d.errs)}
	case d.counts[changeCreate]+d.counts[changeUpdate] > 0:
		return &exitError{code: diffExitChanges}
	}
	return nil
}

func (d *diffRun) namespace(it applyItem, server map[string]*api.Namespace, seen map[string]string) {
	ns, err := quadlet.ParseNamespace(filepath.Base(it.label), it.namespace)
	if err != nil {
		d.fail(it, err)
		return
	}
	key := "namespace " + ns.Metadata.Name
	if prev, ok := seen[key]; ok {
		d.fail(it, fmt.Errorf("namespace %s is also defined by %s", ns.Metadata.Name, prev))
		return
	}
	seen[key] = it.label
	d.nsKnown[ns.Metadata.Name] = true
	ch := compareNamespace(ns, server[ns.Metadata.Name])
	d.counts[ch]++
	fmt.Fprintf(d.stdout, "%c namespace %s: %s\n", ch, ns.Metadata.Name, ch.verb())
	if ch == changeUpdate {
		fmt.Fprintf(d.stdout, "    labels: %v -> %v\n", server[ns.Metadata.Name].Labels, ns.Metadata.Labels)
	}
}

// readLocal reads and parses one workload item the way apply and the server
// together do: the namespace from -n, else from workload.kat.
func readLocal(it applyItem, nsFlag string) (*quadlet.Quadlet, error) {
	var files map[string][]byte
	var err error
	if it.dir != "" {
		files, err = quadlet.ReadDir(it.dir, quadlet.DefaultLimits)
	} else {
		var archive []byte
		if archive, err = os.ReadFile(it.archive); err != nil {
			return nil, unwrapPathError(err)
		}
		files, err = quadlet.ReadArchive(bytes.NewReader(archive), quadlet.DefaultLimits)
	}
	if err != nil {
		return nil, err
	}
	ns := nsFlag
	if ns == "" {
		ns = peekNamespace(files[quadlet.WorkloadFile])
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: ns})
	if err != nil {
		return nil, err
	}
	if q.Namespace() != ns {
		return nil, &quadlet.FieldError{File: quadlet.WorkloadFile, Field: "metadata.namespace",
			Message: fmt.Sprintf("names namespace %q but -n is %q", q.Namespace(), ns)}
	}
	return q, nil
}

func (d *diffRun) workload(ctx context.Context, it applyItem, nsFlag string, seen map[string]string) error {
	q, err := readLocal(it, nsFlag)
	if err != nil {
		return err
	}
	ns, name := q.Namespace(), q.Name()
	key := ns + "/" + name
	if prev, ok := seen[key]; ok {
		return fmt.Errorf("workload %s is also defined by %s", key, prev)
	}
	seen[key] = it.label
	if !d.nsKnown[ns] {
		return fmt.Errorf("workload %s: namespace %q does not exist and %s does not create it: apply would fail", key, ns, filepath.Base(it.label))
	}
	server, err := d.c.GetWorkload(ctx, ns, name)
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound {
		server, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("get workload %s: %w", key, err)
	}
	ch := compareWorkload(q.SpecHash(), server)
	note := ""
	if server != nil && server.Owner.Kind == api.OwnerGit && !server.Suspended {
		note = fmt.Sprintf(" (managed by Git source %s, path %s: apply needs --force)", server.Owner.Source, server.Owner.Path)
	}
	d.counts[ch]++
	gen := ""
	if server != nil {
		gen = fmt.Sprintf(" (generation %d)", server.Generation)
	}
	fmt.Fprintf(d.stdout, "%c workload %s: %s%s%s\n", ch, key, ch.verb(), gen, note)
	if ch != changeUpdate {
		return nil
	}
	remote := make(map[string][]byte, len(server.Files))
	for _, f := range server.Files {
		b, err := d.c.GetWorkloadFile(ctx, ns, name, f)
		if err != nil {
			return fmt.Errorf("get file %s of workload %s: %w", f, key, err)
		}
		remote[f] = b
	}
	fmt.Fprint(d.stdout, fileDiffs("cluster:"+key, it.label, remote, q.Files))
	return nil
}
