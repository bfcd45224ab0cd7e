package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// workloadJSON is the subset of `katcall get workloads -o json` the tests
// compare; the issue names these fields.
type workloadJSON struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Generation int64  `json:"generation"`
	SpecHash   string `json:"specHash"`
	Owner      struct {
		Kind string `json:"kind"`
	} `json:"owner"`
	Suspended *bool `json:"suspended"`
	Status    *struct {
		ObservedGeneration *int64            `json:"observedGeneration"`
		Phase              string            `json:"phase"`
		Desired            *int              `json:"desired"`
		Ready              *int              `json:"ready"`
		Conditions         []json.RawMessage `json:"conditions"`
		LastError          *string           `json:"lastError"`
	} `json:"status"`
}

func getWorkloads(t *testing.T, c *Cluster) (string, []workloadJSON) {
	t.Helper()
	r := c.Katcall(context.Background(), "get", "workloads", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("katcall get workloads: %s", r)
	}
	var ws []workloadJSON
	if err := json.Unmarshal([]byte(r.Stdout), &ws); err != nil {
		t.Fatalf("katcall get workloads -o json is not a JSON array: %v\n%s", err, r.Stdout)
	}
	return r.Stdout, ws
}

func mustApply(t *testing.T, c *Cluster, path string) string {
	t.Helper()
	r := c.Katcall(context.Background(), "apply", "-f", path)
	if r.Code != 0 {
		t.Fatalf("katcall apply -f %s: %s", path, r)
	}
	return r.Stdout
}

func TestStatusReportsTheLeader(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	r := c.Katcall(context.Background(), "status")
	if r.Code != 0 {
		t.Fatalf("katcall status: %s", r)
	}
	for _, want := range []string{"Cluster:    e2e", "Leader:     " + c.Node, "Nodes:      1/1 ready", "default", "kat-core"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("katcall status lacks %q:\n%s", want, r.Stdout)
		}
	}
	r = c.Katcall(context.Background(), "get", "nodes", "-o", "json")
	var nodes []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Leader bool   `json:"leader"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("get nodes -o json: %v\n%s", err, r)
	}
	if nodes[0].Name != c.Node || nodes[0].Status != "Ready" || !nodes[0].Leader {
		t.Fatalf("node = %+v, want %s Ready leader", nodes[0], c.Node)
	}
}

func TestApplyExamplesRepo(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	examples := filepath.Join(RepoRoot(), "examples-repo")
	out := mustApply(t, c, examples)
	for _, want := range []string{"namespace demo applied", "workload default/hello created (generation 1)",
		"workload demo/nightly-report created", "workload demo/node-monitor created", "namespace kat-core applied",
		"workload kat-core/ingress created"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	raw, ws := getWorkloads(t, c)
	if len(ws) != 4 {
		t.Fatalf("got %d workloads, want 4:\n%s", len(ws), raw)
	}
	for _, w := range ws {
		if w.Namespace == "" || w.Name == "" || w.Type == "" || w.Generation != 1 || len(w.SpecHash) != 64 ||
			w.Owner.Kind != "api" || w.Suspended == nil || w.Status == nil || w.Status.ObservedGeneration == nil ||
			w.Status.Phase == "" || w.Status.Desired == nil || w.Status.Ready == nil || w.Status.Conditions == nil ||
			w.Status.LastError == nil {
			t.Errorf("workload JSON misses a field the API promises: %+v", w)
		}
	}

	// The same directories again: nothing changes.
	out = mustApply(t, c, examples)
	if !strings.Contains(out, "workload default/hello unchanged (generation 1)") {
		t.Errorf("re-apply output:\n%s", out)
	}
	raw2, _ := getWorkloads(t, c)
	if raw2 != raw {
		t.Errorf("re-applying identical directories changed the workloads:\nbefore %s\nafter %s", raw, raw2)
	}

	// A comment-only change keeps the spec hash; a value change moves the generation.
	dir := copyDir(t, filepath.Join(examples, "default", "hello"))
	appendFile(t, filepath.Join(dir, "workload.kat"), "\n# a comment does not change the spec\n")
	if out := mustApply(t, c, dir); !strings.Contains(out, "unchanged (generation 1)") {
		t.Errorf("comment-only change: %s", out)
	}
	replace(t, filepath.Join(dir, "workload.kat"), "replicas: 2", "replicas: 3")
	if out := mustApply(t, c, dir); !strings.Contains(out, "configured (generation 2)") {
		t.Errorf("replicas change: %s", out)
	}
	r := c.Katcall(context.Background(), "delete", "workload", "demo/node-monitor")
	if r.Code != 0 || !strings.Contains(r.Stdout, "deleted") {
		t.Fatalf("delete: %s", r)
	}
	if _, ws := getWorkloads(t, c); len(ws) != 3 {
		t.Fatalf("after delete: %d workloads, want 3", len(ws))
	}
	if r := c.Katcall(context.Background(), "delete", "workload", "demo/node-monitor"); r.Code == 0 ||
		!strings.Contains(r.Stderr, "not found") {
		t.Fatalf("second delete should fail with not found: %s", r)
	}
}

// TestInvalidInputIsRefusedAndChangesNothing replays the quadlet package's
// invalid corpus, and hostile archives and directories, through katcall apply.
func TestInvalidInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	mustApply(t, c, filepath.Join(RepoRoot(), "examples-repo"))
	_, beforeWs := getWorkloads(t, c)
	before := specsOf(beforeWs)

	corpus := filepath.Join(RepoRoot(), "quadlet", "testdata", "invalid")
	wants, err := filepath.Glob(filepath.Join(corpus, "*.want"))
	if err != nil || len(wants) < 20 {
		t.Fatalf("invalid corpus: %d cases (%v), want at least 20", len(wants), err)
	}
	for _, wantFile := range wants {
		name := strings.TrimSuffix(filepath.Base(wantFile), ".want")
		t.Run("corpus/"+name, func(t *testing.T) {
			want := strings.TrimSpace(readFile(t, wantFile))
			r := c.Katcall(context.Background(), "apply", "-f", filepath.Join(corpus, name))
			if r.Code == 0 {
				t.Fatalf("apply of invalid %s succeeded: %s", name, r)
			}
			// katcall indents each line of a refusal: every line the
			// parser names must be there.
			for _, line := range strings.Split(want, "\n") {
				if !strings.Contains(r.Stderr, strings.TrimSpace(line)) {
					t.Fatalf("error does not name %q:\n%s", line, r.Stderr)
				}
			}
		})
	}

	for _, tc := range hostileInputs(t) {
		t.Run("hostile/"+tc.name, func(t *testing.T) {
			r := c.Katcall(context.Background(), "apply", "-f", tc.path)
			if r.Code == 0 {
				t.Fatalf("apply of %s succeeded: %s", tc.name, r)
			}
			// The reason must be in the message itself, not merely in the
			// path katcall echoes.
			if reason := strings.ReplaceAll(r.Stderr, tc.path, "PATH"); !strings.Contains(reason, tc.want) {
				t.Fatalf("error does not say %q:\n%s", tc.want, r.Stderr)
			}
		})
	}

	_, afterWs := getWorkloads(t, c)
	// Status moves on its own as agents start the instances; the desired
	// state must not.
	if after := specsOf(afterWs); after != before {
		t.Fatalf("refused input changed the workloads:\nbefore %s\nafter %s", before, after)
	}
	checkAuditShowsApplies(t, c)
}

type hostileCase struct {
	name, path, want string
}

func hostileInputs(t *testing.T) []hostileCase {
	t.Helper()
	dir := t.TempDir()
	valid := readFile(t, filepath.Join(RepoRoot(), "examples-repo", "default", "hello", "workload.kat"))
	var cases []hostileCase
	archive := func(name, want string, entries ...tarEntry) {
		p := filepath.Join(dir, name+".tar.gz")
		writeTarGz(t, p, entries)
		cases = append(cases, hostileCase{name: name, path: p, want: want})
	}
	archive("traversal", `".." is not allowed`, tarEntry{name: "../workload.kat", body: valid})
	archive("absolute-path", "absolute paths are not allowed", tarEntry{name: "/etc/workload.kat", body: valid})
	archive("symlink", "symbolic links are not allowed", tarEntry{name: "workload.kat", link: "/etc/passwd", typ: tar.TypeSymlink})
	archive("nested", "files must be at the root", tarEntry{name: "sub/workload.kat", body: valid})
	archive("not-kat", `"notes.txt": not a .kat file`, tarEntry{name: "workload.kat", body: valid}, tarEntry{name: "notes.txt", body: "x"})
	archive("oversized", "more than the limit of 262144", tarEntry{name: "workload.kat", body: valid + "\n#" + strings.Repeat("x", 300<<10)})
	archive("empty", "holds no .kat files", nil...)
	notGzip := filepath.Join(dir, "not-gzip.tar.gz")
	if err := os.WriteFile(notGzip, []byte("this is not gzip"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, hostileCase{name: "not-gzip", path: notGzip, want: "not a gzip stream"})

	emptyDir := filepath.Join(dir, "empty-dir")
	os.MkdirAll(emptyDir, 0o700)
	cases = append(cases, hostileCase{name: "empty-directory", path: emptyDir, want: "no workload.kat or namespace.kat"})
	linkDir := filepath.Join(dir, "link-dir")
	os.MkdirAll(linkDir, 0o700)
	os.WriteFile(filepath.Join(linkDir, "workload.kat"), []byte(valid), 0o600)
	os.Symlink("/etc/hostname", filepath.Join(linkDir, "job.kat"))
	cases = append(cases, hostileCase{name: "symlink-in-directory", path: linkDir, want: "job.kat: is a symbolic link"})
	return cases
}

type tarEntry struct {
	name, body, link string
	typ              byte
}

func writeTarGz(t *testing.T, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link,
			ModTime: time.Unix(0, 0)}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	gz.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestKillAndRestartKeepsEveryWorkload(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	mustApply(t, c, filepath.Join(RepoRoot(), "examples-repo"))
	dir := copyDir(t, filepath.Join(RepoRoot(), "examples-repo", "default", "hello"))
	replace(t, filepath.Join(dir, "workload.kat"), "replicas: 2", "replicas: 5")
	mustApply(t, c, dir)
	before, wsBefore := getWorkloads(t, c)
	tokenBefore := readFile(t, filepath.Join(c.DataDir, "admin.token"))
	caBefore := readFile(t, filepath.Join(c.DataDir, "pki", "ca.crt"))

	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("after kill -9, the restarted leader answered katcall status in %s", time.Since(start).Round(time.Millisecond))
	after, wsAfter := getWorkloads(t, c)
	if len(wsAfter) != len(wsBefore) {
		t.Fatalf("after kill -9 and restart: %d workloads, want %d\nbefore %s\nafter %s", len(wsAfter), len(wsBefore), before, after)
	}
	for i := range wsBefore {
		b, a := wsBefore[i], wsAfter[i]
		if a.Namespace != b.Namespace || a.Name != b.Name || a.Generation != b.Generation || a.SpecHash != b.SpecHash {
			t.Errorf("workload changed across restart: before %+v after %+v", b, a)
		}
	}
	if readFile(t, filepath.Join(c.DataDir, "admin.token")) != tokenBefore || readFile(t, filepath.Join(c.DataDir, "pki", "ca.crt")) != caBefore {
		t.Error("restart changed the admin token or the CA")
	}
	// A clean SIGTERM exits 0, and the next start resumes again.
	if err := c.Stop(30 * time.Second); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, c.Tail(20))
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again, _ := getWorkloads(t, c); again != after {
		t.Errorf("state changed across a clean restart:\nbefore %s\nafter %s", after, again)
	}
}

func TestKatcallErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	dir := t.TempDir()
	cfg := readFile(t, c.KatcallConfig())
	tests := []struct {
		name   string
		config string
		want   string
	}{
		{name: "wrong token", config: replaceLine(cfg, "token:", "token: not-the-token"), want: "authentication failed: invalid bearer token"},
		{name: "nothing listening", config: strings.Replace(cfg, ":"+itoa(c.APIPort), ":1", 1), want: "connection refused (is kat-agent running?)"},
		{name: "missing file", config: "", want: "no configuration at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if tc.config != "" {
				if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := RunKatcall(context.Background(), c.Bin.Katcall, "--config", path, "get", "workloads")
			if r.Code == 0 {
				t.Fatalf("katcall succeeded: %s", r)
			}
			lines := strings.Split(strings.TrimSpace(r.Stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("stderr should be one line containing %q, got:\n%s", tc.want, r.Stderr)
			}
		})
	}
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(readFile(t, path)+text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func replace(t *testing.T, path, old, new string) {
	t.Helper()
	s := readFile(t, path)
	if !strings.Contains(s, old) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(s, old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

func replaceLine(s, prefix, line string) string {
	lines := strings.Split(s, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
	if i >= 0 {
		lines[i] = line
	}
	return strings.Join(lines, "\n")
}

// specsOf renders the desired state of workloads, without their status.
func specsOf(ws []workloadJSON) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%s/%s %s gen %d %s owner %s\n", w.Namespace, w.Name, w.Type, w.Generation, w.SpecHash, w.Owner.Kind)
	}
	return b.String()
}
