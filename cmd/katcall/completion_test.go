package main

import (
	"slices"
	"strings"
	"testing"
)

// TestCompletesNames: katcall's shell completion offers the cluster's node
// names where a node is expected, resource kinds and then names for get and
// delete, never file names; an unreachable cluster completes nothing.
func TestCompletesNames(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	complete := func(args ...string) []string {
		t.Helper()
		code, out, errOut := c.katcall(append([]string{"__complete"}, args...)...)
		if code != 0 {
			t.Fatalf("__complete %q: %d\n%s", args, code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		// The last line is cobra's directive: 4 is "no file completion".
		if last := lines[len(lines)-1]; last != ":4" {
			t.Errorf("__complete %q: directive %s, want :4 (no file names)", args, last)
		}
		return lines[:len(lines)-1]
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"cordon", ""}, []string{"n1", "n2"}},
		{[]string{"drain", "n"}, []string{"n1", "n2"}},
		{[]string{"get", "no"}, []string{"nodes"}},
		{[]string{"get", "nodes", "n2"}, []string{"n2"}},
		{[]string{"delete", "node", ""}, []string{"n1", "n2"}},
		{[]string{"label", "node", ""}, []string{"n1", "n2"}},
		{[]string{"cordon", "n1", ""}, nil},
		{[]string{"metrics-cert", ""}, nil},
	} {
		if got := complete(tc.args...); !slices.Equal(got, tc.want) {
			t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
		}
	}
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"--config", "/nonexistent/katcall.yaml", "__complete", "cordon", ""}, &out, &errOut)
	if code != 0 || strings.TrimSpace(out.String()) != ":4" {
		t.Errorf("completion without a cluster: %d %q %q, want only the directive", code, out.String(), errOut.String())
	}
}
