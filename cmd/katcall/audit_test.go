package main

import (
	"encoding/json"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
)

// TestGetAudit: katcall's node verbs, allowed and refused, show in get
// audit, as a table and as JSON, filtered by resource and actor; bad flags
// are refused naming the flag.
func TestGetAudit(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	if code, _, errOut := c.katcall("cordon", "n1"); code != 0 {
		t.Fatalf("cordon n1: %d %s", code, errOut)
	}
	if code, _, _ := c.katcall("cordon", "nope"); code == 0 {
		t.Fatal("cordon of an unknown node succeeded")
	}
	if code, _, errOut := c.katcall("label", "node", "n2", "disk=ssd"); code != 0 {
		t.Fatalf("label n2: %d %s", code, errOut)
	}

	code, out, errOut := c.katcall("get", "audit")
	if code != 0 {
		t.Fatalf("get audit: %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "TIME ACTOR VERB RESOURCE RESULT" {
		t.Fatalf("get audit:\n%s", out)
	}
	for i, want := range []string{"admin cordon node/n1 200", "admin cordon node/nope 404 ", "admin label node/n2 200"} {
		if got := strings.Join(strings.Fields(lines[i+1])[2:], " "); !strings.HasPrefix(got, want) {
			t.Errorf("line %d: %q, want it to start %q", i+1, got, want)
		}
	}

	code, out, errOut = c.katcall("get", "audit", "node/n2", "-o", "json")
	var es []api.AuditEntry
	if code != 0 || json.Unmarshal([]byte(out), &es) != nil || len(es) != 1 || es[0].Verb != "label" || es[0].Actor != "admin" {
		t.Fatalf("get audit node/n2 -o json: %d %s %s", code, out, errOut)
	}
	if code, out, _ = c.katcall("get", "audit", "--actor", "node:", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("get audit --actor node: = %d %q, want []", code, out)
	}
	if code, out, _ = c.katcall("get", "audit", "--limit", "1", "-o", "yaml"); code != 0 || !strings.Contains(out, "verb: label") || strings.Contains(out, "cordon") {
		t.Fatalf("get audit --limit 1 -o yaml = %d\n%s", code, out)
	}

	if code, out, _ := c.katcall("__complete", "get", "au"); code != 0 || !strings.HasPrefix(out, "audit\n") {
		t.Errorf("__complete get au = %d %q, want audit", code, out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "audit", "--limit", "0"}, "--limit"},
		{[]string{"get", "audit", "--actor", ""}, "--actor"},
		{[]string{"get", "audit", "-n", "default"}, "--namespace"},
		{[]string{"get", "nodes", "--actor", "admin"}, "--actor"},
		{[]string{"get", "audit", "--limit", "5000"}, `"limit"`},
	} {
		if code, _, errOut := c.katcall(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("katcall %q: %d %q, want an error naming %s", tc.args, code, errOut, tc.want)
		}
	}
}
