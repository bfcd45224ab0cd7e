package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffExitCodes runs katcall diff against a real cluster: 1 while
// something would change, 0 once applied, 1 with a unified diff after an
// edit, 2 for invalid input (named by file and line) or a bad invocation.
func TestDiffExitCodes(t *testing.T) {
	t.Parallel()
	c := StartTestCluster(t)
	examples := copyDir(t, filepath.Join(RepoRoot(), "examples-repo"))
	diff := func(t *testing.T, args ...string) Result {
		t.Helper()
		return c.Katcall(context.Background(), append([]string{"diff"}, args...)...)
	}
	expect := func(t *testing.T, r Result, code int, stdout, stderr []string) {
		t.Helper()
		t.Logf("katcall diff: %s", r)
		if r.Code != code {
			t.Fatalf("exit %d, want %d: %s", r.Code, code, r)
		}
		for _, want := range stdout {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("stdout lacks %q: %s", want, r)
			}
		}
		for _, want := range stderr {
			if !strings.Contains(r.Stderr, want) {
				t.Errorf("stderr lacks %q: %s", want, r)
			}
		}
	}

	before, _ := getWorkloads(t, c)
	expect(t, diff(t, "-f", examples), 1, []string{"+ namespace demo: created", "+ workload default/hello: created",
		"+ workload demo/nightly-report: created", "+ workload demo/node-monitor: created",
		"= namespace kat-core: unchanged", "5 to create, 0 to change, 1 unchanged"}, nil)
	if after, _ := getWorkloads(t, c); after != before {
		t.Fatalf("katcall diff changed the workloads:\nbefore %s\nafter %s", before, after)
	}

	mustApply(t, c, examples)
	expect(t, diff(t, "-f", examples), 0, []string{"= workload default/hello: unchanged (generation 1)", "0 to create, 0 to change, 6 unchanged"}, nil)

	hello := filepath.Join(examples, "default", "hello")
	appendFile(t, filepath.Join(hello, "workload.kat"), "\n# a comment does not change the spec\n")
	expect(t, diff(t, "-f", hello), 0, []string{"= workload default/hello: unchanged"}, nil)

	replace(t, filepath.Join(hello, "workload.kat"), "replicas: 2", "replicas: 3")
	expect(t, diff(t, "-f", examples), 1, []string{"~ workload default/hello: changed (generation 1)",
		"--- cluster:default/hello/workload.kat\n+++ " + filepath.Join(hello, "workload.kat") + "\n",
		"-  replicas: 2\n+  replicas: 3\n", "0 to create, 1 to change, 5 unchanged"}, nil)

	replace(t, filepath.Join(hello, "workload.kat"), "replicas: 3", "replicas: lots")
	expect(t, diff(t, "-f", examples), 2, nil, []string{filepath.Join(hello, "workload.kat") + ":11: spec.replicas"})

	expect(t, diff(t, "-f", filepath.Join(examples, "missing")), 2, nil, []string{"missing: no such file or directory"})
	expect(t, diff(t, "--no-such-flag"), 2, nil, []string{"unknown flag: --no-such-flag"})
	expect(t, diff(t), 2, nil, []string{"-f: required"})
}
