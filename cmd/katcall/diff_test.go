package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

func TestCompareWorkload(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		server *api.Workload
		want   change
	}{
		{"absent", nil, changeCreate},
		{"same hash", &api.Workload{WorkloadMeta: api.WorkloadMeta{SpecHash: "aaa"}}, changeNone},
		{"other hash", &api.Workload{WorkloadMeta: api.WorkloadMeta{SpecHash: "bbb"}}, changeUpdate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := compareWorkload("aaa", tc.server); got != tc.want {
				t.Fatalf("got %c, want %c", got, tc.want)
			}
		})
	}
}

func TestCompareNamespace(t *testing.T) {
	t.Parallel()
	local := &quadlet.Namespace{Metadata: quadlet.ObjectMeta{Name: "demo", Labels: map[string]string{"team": "platform"}}}
	cases := []struct {
		name   string
		local  *quadlet.Namespace
		server *api.Namespace
		want   change
	}{
		{"absent", local, nil, changeCreate},
		{"same labels", local, &api.Namespace{Name: "demo", Labels: map[string]string{"team": "platform"}}, changeNone},
		{"other labels", local, &api.Namespace{Name: "demo", Labels: map[string]string{"team": "web"}}, changeUpdate},
		{"no labels either side", &quadlet.Namespace{}, &api.Namespace{Name: "demo"}, changeNone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := compareNamespace(tc.local, tc.server); got != tc.want {
				t.Fatalf("got %c, want %c", got, tc.want)
			}
		})
	}
}

func TestUnifiedDiff(t *testing.T) {
	t.Parallel()
	a := "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\n"
	b := "one\ntwo\nTHREE\nfour\nfive\nsix\nseven\neight\nnine\nten\neleven\ntwelve\nthirteen\n"
	want := `--- a
+++ b
@@ -1,6 +1,6 @@
 one
 two
-three
+THREE
 four
 five
 six
@@ -10,3 +10,4 @@
 ten
 eleven
 twelve
+thirteen
`
	if got := unifiedDiff("a", "b", []byte(a), []byte(b)); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := unifiedDiff("a", "b", []byte(a), []byte(a)); got != "" {
		t.Fatalf("equal inputs gave a diff:\n%s", got)
	}
	if got := unifiedDiff("/dev/null", "b", nil, []byte("x\n")); got != "--- /dev/null\n+++ b\n@@ -0,0 +1 @@\n+x\n" {
		t.Fatalf("diff from nothing:\n%s", got)
	}
}

// TestUnifiedDiffRoundTrip applies each diff of random line edits to its
// input and checks it yields the output.
func TestUnifiedDiffRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"a", "b", "c", "d", "e"}
	gen := func() []string {
		lines := make([]string, rng.IntN(30))
		for i := range lines {
			lines[i] = words[rng.IntN(len(words))]
		}
		return lines
	}
	for i := range 500 {
		a, b := gen(), gen()
		if rng.IntN(2) == 0 { // mostly-equal pairs, the usual case
			b = append([]string(nil), a...)
			for range rng.IntN(4) {
				if len(b) > 0 {
					b[rng.IntN(len(b))] = "z"
				}
			}
		}
		text := func(l []string) []byte {
			if len(l) == 0 {
				return nil
			}
			return []byte(strings.Join(l, "\n") + "\n")
		}
		d := unifiedDiff("a", "b", text(a), text(b))
		got, err := applyUnified(a, d)
		if err != nil {
			t.Fatalf("case %d: %v\n%s", i, err, d)
		}
		if strings.Join(got, "\n") != strings.Join(b, "\n") {
			t.Fatalf("case %d: patch gives %q, want %q\n%s", i, got, b, d)
		}
	}
}

// applyUnified applies a unified diff to a, checking every hunk header.
func applyUnified(a []string, diff string) ([]string, error) {
	if diff == "" {
		return a, nil
	}
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")[2:]
	var out []string
	pos := 0 // next line of a to copy
	for i := 0; i < len(lines); {
		var as, al, bs, bl int
		h := lines[i]
		parse := func(s string) (int, int) {
			start, n, ok := strings.Cut(s, ",")
			x, _ := strconv.Atoi(start)
			if !ok {
				return x, 1
			}
			y, _ := strconv.Atoi(n)
			return x, y
		}
		parts := strings.Fields(h)
		if len(parts) != 4 || parts[0] != "@@" {
			return nil, fmt.Errorf("bad hunk header %q", h)
		}
		as, al = parse(strings.TrimPrefix(parts[1], "-"))
		bs, bl = parse(strings.TrimPrefix(parts[2], "+"))
		from := as - 1
		if al == 0 {
			from = as
		}
		out = append(out, a[pos:from]...)
		pos = from
		if bl == 0 && len(out) != bs || bl > 0 && len(out) != bs-1 {
			return nil, fmt.Errorf("hunk %q starts at output line %d", h, len(out)+1)
		}
		i++
		na, nb := 0, 0
		for ; i < len(lines) && !strings.HasPrefix(lines[i], "@@"); i++ {
			l := lines[i]
			switch l[0] {
			case ' ', '-':
				if pos >= len(a) || a[pos] != l[1:] {
					return nil, fmt.Errorf("line %q does not match input line %d", l, pos+1)
				}
				pos++
				na++
				if l[0] == ' ' {
					out = append(out, l[1:])
					nb++
				}
			case '+':
				out = append(out, l[1:])
				nb++
			}
		}
		if na != al || nb != bl {
			return nil, fmt.Errorf("hunk %q has %d/%d lines", h, na, nb)
		}
	}
	return append(out, a[pos:]...), nil
}

// fakeCluster is an in-memory clusterView.
type fakeCluster struct {
	namespaces []api.NamespaceView
	workloads  map[string]*api.Workload
	files      map[string]map[string][]byte
	down       bool
}

func notFound(what string) error {
	return &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: what + " not found"}
}

func (f *fakeCluster) ListNamespaces(context.Context) ([]api.NamespaceView, error) {
	if f.down {
		return nil, errors.New("cannot reach the KAT API at https://127.0.0.1:1: connection refused")
	}
	return f.namespaces, nil
}

func (f *fakeCluster) GetWorkload(_ context.Context, ns, name string) (*api.Workload, error) {
	if w, ok := f.workloads[ns+"/"+name]; ok {
		return w, nil
	}
	return nil, notFound("workload " + ns + "/" + name)
}

func (f *fakeCluster) GetWorkloadFile(_ context.Context, ns, name, file string) ([]byte, error) {
	if b, ok := f.files[ns+"/"+name][file]; ok {
		return b, nil
	}
	return nil, notFound("file " + file)
}

// store records the Quadlet directory dir as applied.
func (f *fakeCluster) store(t *testing.T, dir string, gen int64, owner api.Owner) {
	t.Helper()
	q, err := readLocal(applyItem{label: dir, dir: dir}, "")
	if err != nil {
		t.Fatal(err)
	}
	key := q.Namespace() + "/" + q.Name()
	w := &api.Workload{WorkloadMeta: api.WorkloadMeta{Namespace: q.Namespace(), Name: q.Name(), Generation: gen, SpecHash: q.SpecHash(), Owner: owner}}
	for name := range q.Files {
		w.Files = append(w.Files, name)
	}
	if f.workloads == nil {
		f.workloads, f.files = map[string]*api.Workload{}, map[string]map[string][]byte{}
	}
	f.workloads[key], f.files[key] = w, q.Files
}

func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func editFile(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s does not hold %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRunDiff(t *testing.T) {
	t.Parallel()
	examples := copyTree(t, filepath.Join("..", "..", "examples-repo"))
	hello := filepath.Join(examples, "default", "hello")
	applied := func(t *testing.T) *fakeCluster {
		t.Helper()
		f := &fakeCluster{namespaces: []api.NamespaceView{{Namespace: api.Namespace{Name: "default"}}, {Namespace: api.Namespace{Name: "demo", Labels: map[string]string{"team": "platform"}}}, {Namespace: api.Namespace{Name: "kat-core"}}}}
		for _, dir := range []string{hello, filepath.Join(examples, "demo", "node-monitor"), filepath.Join(examples, "demo", "nightly-report"), filepath.Join(examples, "kat-core", "ingress")} {
			f.store(t, dir, 1, api.Owner{Kind: api.OwnerAPI})
		}
		return f
	}
	cases := []struct {
		name      string
		cluster   func(t *testing.T) *fakeCluster
		edit      func(t *testing.T, dir string) string // returns the -f path
		code      int
		stdout    []string
		stderr    []string
		notStdout []string
	}{
		{
			name: "empty cluster",
			cluster: func(*testing.T) *fakeCluster {
				return &fakeCluster{namespaces: []api.NamespaceView{{Namespace: api.Namespace{Name: "default"}}}}
			},
			code: diffExitChanges,
			stdout: []string{"+ namespace demo: created", "+ workload default/hello: created", "+ workload demo/node-monitor: created",
				"6 to create, 0 to change, 0 unchanged"},
		},
		{
			name:    "everything applied",
			cluster: applied,
			code:    diffExitSame,
			stdout:  []string{"= namespace demo: unchanged", "= workload default/hello: unchanged (generation 1)", "0 to create, 0 to change, 6 unchanged"},
		},
		{
			name:    "comment only",
			cluster: applied,
			edit: func(t *testing.T, dir string) string {
				t.Helper()
				editFile(t, filepath.Join(dir, "default", "hello", "workload.kat"), "kind: Workload\n", "kind: Workload # same spec\n")
				return dir
			},
			code:   diffExitSame,
			stdout: []string{"= workload default/hello: unchanged"},
		},
		{
			name:    "replicas changed",
			cluster: applied,
			edit: func(t *testing.T, dir string) string {
				t.Helper()
				editFile(t, filepath.Join(dir, "default", "hello", "workload.kat"), "replicas: 2", "replicas: 3")
				return filepath.Join(dir, "default", "hello")
			},
			code: diffExitChanges,
			stdout: []string{"~ workload default/hello: changed (generation 1)", "--- cluster:default/hello/workload.kat",
				"-  replicas: 2\n+  replicas: 3\n", "0 to create, 1 to change, 0 unchanged"},
			notStdout: []string{"VirtualLoadBalancer.kat"},
		},
		{
			name: "git owned",
			cluster: func(t *testing.T) *fakeCluster {
				t.Helper()
				f := applied(t)
				f.workloads["default/hello"].Owner = api.Owner{Kind: api.OwnerGit, Source: "config", Path: "default/hello"}
				f.workloads["default/hello"].SpecHash = "old"
				return f
			},
			edit:   func(_ *testing.T, dir string) string { return filepath.Join(dir, "default", "hello") },
			code:   diffExitChanges,
			stdout: []string{"managed by Git source config, path default/hello: apply needs --force"},
		},
		{
			name:    "file removed",
			cluster: applied,
			edit: func(t *testing.T, dir string) string {
				t.Helper()
				d := filepath.Join(dir, "default", "hello")
				if err := os.Remove(filepath.Join(d, "VirtualLoadBalancer.kat")); err != nil {
					t.Fatal(err)
				}
				return d
			},
			code:   diffExitChanges,
			stdout: []string{"--- cluster:default/hello/VirtualLoadBalancer.kat\n+++ /dev/null\n"},
		},
		{
			name:    "invalid file",
			cluster: applied,
			edit: func(t *testing.T, dir string) string {
				t.Helper()
				editFile(t, filepath.Join(dir, "default", "hello", "workload.kat"), "replicas: 2", "replicas: many")
				return dir
			},
			code:   diffExitError,
			stderr: []string{filepath.Join("default", "hello", "workload.kat") + ":11: spec.replicas"},
			stdout: []string{"= workload demo/node-monitor: unchanged"},
		},
		{
			name:    "archive",
			cluster: applied,
			edit: func(t *testing.T, dir string) string {
				t.Helper()
				files, err := quadlet.ReadDir(filepath.Join(dir, "default", "hello"), quadlet.DefaultLimits)
				if err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				if err := quadlet.WriteArchive(&buf, files); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(t.TempDir(), "hello.tar.gz")
				if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
					t.Fatal(err)
				}
				return path
			},
			code:   diffExitSame,
			stdout: []string{"= workload default/hello: unchanged (generation 1)"},
		},
		{
			name: "missing namespace",
			cluster: func(*testing.T) *fakeCluster {
				return &fakeCluster{namespaces: []api.NamespaceView{{Namespace: api.Namespace{Name: "default"}}}}
			},
			edit:   func(_ *testing.T, dir string) string { return filepath.Join(dir, "demo", "node-monitor") },
			code:   diffExitError,
			stderr: []string{`namespace "demo" does not exist`},
		},
		{
			name:    "unreachable",
			cluster: func(*testing.T) *fakeCluster { return &fakeCluster{down: true} },
			code:    diffExitError,
			stderr:  []string{"connection refused"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyTree(t, examples)
			path := dir
			if tc.edit != nil {
				path = tc.edit(t, dir)
			}
			var stdout, stderr bytes.Buffer
			err := runDiff(context.Background(), tc.cluster(t), &stdout, &stderr, &diffOptions{path: path})
			code := 0
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
				stderr.WriteString(ee.msg)
			} else if err != nil {
				t.Fatalf("runDiff returned %v, want an exitError", err)
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, &stdout, &stderr)
			}
			for _, want := range tc.stdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, &stdout)
				}
			}
			for _, unwanted := range tc.notStdout {
				if strings.Contains(stdout.String(), unwanted) {
					t.Errorf("stdout holds %q:\n%s", unwanted, &stdout)
				}
			}
			for _, want := range tc.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, &stderr)
				}
			}
		})
	}
}
