package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// auditJSON is the subset of `katcall get audit -o json` the check reads.
type auditJSON struct {
	Actor     string `json:"actor"`
	Verb      string `json:"verb"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Detail    string `json:"detail"`
	Status    int    `json:"status"`
	Error     string `json:"error"`
}

// checkAuditShowsApplies checks, on a cluster where examples-repo was
// applied and invalid workloads were refused, that katcall get audit shows
// both, by the admin, with their results; that the agent logged them as
// component audit; and that the admin token is in neither.
func checkAuditShowsApplies(t *testing.T, c *Cluster) {
	t.Helper()
	r := c.Katcall(context.Background(), "get", "audit", "workload", "--limit", "1000", "-o", "json")
	if r.Code != 0 {
		t.Fatalf("katcall get audit: %s", r)
	}
	var es []auditJSON
	if err := json.Unmarshal([]byte(r.Stdout), &es); err != nil {
		t.Fatalf("katcall get audit -o json is not a JSON array: %v\n%s", err, r.Stdout)
	}
	var applied, refused int
	for _, e := range es {
		if e.Actor != "admin" || e.Verb != "apply" || e.Resource != "workload" {
			t.Fatalf("audit entry %+v: want admin apply workload", e)
		}
		switch {
		case e.Status < 300 && e.Name != "" && e.Error == "":
			applied++
		case e.Status == 422 && e.Error != "":
			refused++
		}
	}
	if applied == 0 || refused == 0 {
		t.Fatalf("katcall get audit shows %d applied and %d refused (422) applies, want some of both:\n%s", applied, refused, r.Stdout)
	}
	table := c.Katcall(context.Background(), "get", "audit", "--limit", "1000")
	if table.Code != 0 || !strings.Contains(table.Stdout, "RESULT") || !strings.Contains(table.Stdout, " 422 ") {
		t.Fatalf("katcall get audit (table) lacks a refused apply:\n%s", table)
	}
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	var auditLog strings.Builder
	for line := range strings.Lines(string(log)) {
		if strings.Contains(line, `"component":"audit"`) {
			auditLog.WriteString(line)
		}
	}
	if !strings.Contains(auditLog.String(), `"verb":"apply"`) {
		t.Fatalf("the agent's log has no audit line of an apply:\n%s", c.Tail(20))
	}
	cfg, err := os.ReadFile(c.KatcallConfig())
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(cfg)) {
		if tok, ok := strings.CutPrefix(strings.TrimSpace(line), "token: "); ok && tok != "" &&
			(strings.Contains(r.Stdout, tok) || strings.Contains(auditLog.String(), tok)) {
			t.Fatal("the admin token appears in the audit log")
		}
	}
}

// checkAuditShowsWebhooks checks, on a cluster that was sent a badly signed
// and a signed GitHub push of repo and then katcall sync config, that
// katcall get audit shows the refused webhook without a repository, the
// accepted one naming repo and its ref, and the admin's sync.
func checkAuditShowsWebhooks(t *testing.T, c *Cluster, repo string) {
	t.Helper()
	got := map[string]bool{}
	for _, args := range [][]string{{"--actor", "webhook:"}, {"source/config"}} {
		r := c.Katcall(context.Background(), append([]string{"get", "audit", "-o", "json"}, args...)...)
		if r.Code != 0 {
			t.Fatalf("katcall get audit %q: %s", args, r)
		}
		var es []auditJSON
		if err := json.Unmarshal([]byte(r.Stdout), &es); err != nil {
			t.Fatalf("katcall get audit -o json is not a JSON array: %v\n%s", err, r.Stdout)
		}
		for _, e := range es {
			got[fmt.Sprintf("%s %s %s/%s@%s %d", e.Actor, e.Verb, e.Resource, e.Name, e.Detail, e.Status)] = true
		}
	}
	for _, want := range []string{
		"webhook:github push repo/@ 401",
		"webhook:github push repo/" + repo + "@refs/heads/main 202",
		"admin sync source/config@ 202",
	} {
		if !got[want] {
			t.Errorf("katcall get audit lacks %q; it has %v", want, slices.Sorted(maps.Keys(got)))
		}
	}
}
