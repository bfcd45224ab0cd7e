package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/quadlet"
)

type applyOptions struct {
	path      string
	namespace string
	force     bool
	wait      bool
	timeout   time.Duration
}

func newApplyCommand(g *globals) *cobra.Command {
	o := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply -f PATH",
		Short: "Create or update workloads from Quadlet directories",
		Long: `apply uploads Quadlet directories to the cluster.

PATH is a Quadlet directory (one holding workload.kat), a tar.gz of one, or a tree
such as a config repo: then every namespace.kat in it is applied first, and every
directory holding a workload.kat after. The namespace comes from -n, else from
workload.kat's metadata.namespace, else "default".

Applying a workload that a Git source manages is refused; --force applies it anyway
and suspends Git management of that workload.

--wait then follows each workload's rollout as katcall rollout status does, and exits 1
when one fails (or is rolled back) and 2 when --timeout passes first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.path == "" {
				return errors.New("-f: required: the Quadlet directory, archive or tree to apply")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			return runApply(cmd.Context(), c, g, o)
		},
	}
	cmd.Flags().StringVarP(&o.path, "filename", "f", "", "Quadlet directory, tar.gz archive, or tree of them")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "namespace (default: metadata.namespace, else \"default\")")
	cmd.Flags().BoolVar(&o.force, "force", false, "apply even to Git-managed workloads, suspending their Git management")
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for each workload's rollout to end, printing its progress")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --wait: give up (exit 2) after this long")
	return cmd
}

// applyItem is one thing to upload: a namespace document or a workload.
type applyItem struct {
	label     string
	namespace []byte // namespace.kat content, for namespaces
	dir       string // Quadlet directory, for workloads
	archive   string // tar.gz path, for workloads
}

func runApply(ctx context.Context, c *apiclient.Client, g *globals, o *applyOptions) error {
	items, err := collect(o.path)
	if err != nil {
		return err
	}
	failed := 0
	var applied []api.Workload
	for _, it := range items {
		msg, w, err := applyOne(ctx, c, o, it)
		if w != nil {
			applied = append(applied, *w)
		}
		if err != nil {
			failed++
			fmt.Fprintf(g.stderr, "error: %s: %s\n", it.label, describe(err))
			if isConnectionError(err) {
				return &exitError{code: 1}
			}
			continue
		}
		fmt.Fprintln(g.stdout, msg)
	}
	if failed > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("%d of %d item(s) failed", failed, len(items))}
	}
	if o.wait {
		deadline := time.Now().Add(o.timeout)
		for _, w := range applied {
			if err := waitRollout(ctx, c, g, w.Namespace, w.Name, w.Generation, time.Until(deadline)); err != nil {
				return err
			}
		}
	}
	return nil
}

// collect lists what PATH holds, namespaces first.
func collect(path string) ([]applyItem, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, unwrapPathError(err))
	}
	if !info.IsDir() {
		if !strings.HasSuffix(path, ".tar.gz") && !strings.HasSuffix(path, ".tgz") {
			return nil, fmt.Errorf("-f %s: not a directory or a .tar.gz archive", path)
		}
		return []applyItem{{label: path, archive: path}}, nil
	}
	if _, err := os.Lstat(filepath.Join(path, quadlet.WorkloadFile)); err == nil {
		return []applyItem{{label: path, dir: path}}, nil
	}
	var namespaces, workloads []applyItem
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != path && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if _, err := os.Lstat(filepath.Join(p, quadlet.WorkloadFile)); err == nil {
				workloads = append(workloads, applyItem{label: p, dir: p})
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == quadlet.NamespaceFile {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			namespaces = append(namespaces, applyItem{label: p, namespace: b})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", path, err)
	}
	if len(workloads) == 0 && holdsQuadletFiles(path) {
		// .kat files but no workload.kat: send it as a Quadlet directory so
		// the error names what is missing.
		return []applyItem{{label: path, dir: path}}, nil
	}
	if len(namespaces)+len(workloads) == 0 {
		return nil, fmt.Errorf("-f %s: no %s or %s found", path, quadlet.WorkloadFile, quadlet.NamespaceFile)
	}
	sort.Slice(workloads, func(i, j int) bool { return workloads[i].dir < workloads[j].dir })
	return append(namespaces, workloads...), nil
}

// applyOne uploads one item and returns what to print and, for a workload,
// what the API answered.
func applyOne(ctx context.Context, c *apiclient.Client, o *applyOptions, it applyItem) (string, *api.Workload, error) {
	if it.namespace != nil {
		ns, err := quadlet.ParseNamespace(filepath.Base(it.label), it.namespace)
		if err != nil {
			return "", nil, err
		}
		if _, err := c.PutNamespace(ctx, ns.Metadata.Name, it.namespace); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("namespace %s applied", ns.Metadata.Name), nil, nil
	}
	var archive []byte
	var files map[string][]byte
	if it.dir != "" {
		var err error
		if files, err = quadlet.ReadDir(it.dir, quadlet.DefaultLimits); err != nil {
			return "", nil, err
		}
		var buf bytes.Buffer
		if err := quadlet.WriteArchive(&buf, files); err != nil {
			return "", nil, err
		}
		archive = buf.Bytes()
	} else {
		var err error
		if archive, err = os.ReadFile(it.archive); err != nil {
			return "", nil, unwrapPathError(err)
		}
		// Peek for the namespace only; the server does every check.
		files, _ = quadlet.ReadArchive(bytes.NewReader(archive), quadlet.DefaultLimits)
	}
	ns := o.namespace
	if ns == "" {
		ns = peekNamespace(files[quadlet.WorkloadFile])
	}
	res, err := c.ApplyWorkload(ctx, ns, "", archive, apiclient.ApplyOptions{Force: o.force})
	if err != nil {
		return "", nil, err
	}
	w := res.Workload
	verb := "unchanged"
	switch {
	case res.Created:
		verb = "created"
	case res.Changed:
		verb = "configured"
	}
	msg := fmt.Sprintf("workload %s/%s %s (generation %d)", w.Namespace, w.Name, verb, w.Generation)
	if w.Suspended {
		msg += "; Git management suspended, resume it with katcall resume"
	}
	return msg, &w, nil
}

// holdsQuadletFiles reports whether dir directly holds .kat files other than
// namespace.kat.
func holdsQuadletFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".kat") && e.Name() != quadlet.NamespaceFile {
			return true
		}
	}
	return false
}

// peekNamespace reads metadata.namespace without validating anything. A
// value that is not a valid name is ignored, so that the server's validation
// reports it with its file and line rather than as a bad URL.
func peekNamespace(workload []byte) string {
	var doc struct {
		Metadata struct {
			Namespace string `yaml:"namespace"`
		} `yaml:"metadata"`
	}
	if yaml.Unmarshal(workload, &doc) == nil && quadlet.IsDNSLabel(doc.Metadata.Namespace) {
		return doc.Metadata.Namespace
	}
	return quadlet.DefaultNamespace
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func isConnectionError(err error) bool {
	var apiErr *api.Error
	return !errors.As(err, &apiErr) && strings.HasPrefix(describe(err), "cannot ")
}
