package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

const rolloutWorkload = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: roll, namespace: default}
spec:
  type: Service
  replicas: %d
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Always}
  container: {command: [/bin/true]}
`

// leaderWrites writes the rollout record the leader would for workload
// default/roll: its current generation with outcome (none: in progress).
func leaderWrites(t *testing.T, repo *resources.Repo, outcome string, failure *api.RolloutFailure) {
	t.Helper()
	ctx := context.Background()
	w, err := repo.GetWorkload(ctx, "default", "roll")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := repo.Store().Get(ctx, resources.MetaKey("default", "roll"))
	if err != nil {
		t.Fatal(err)
	}
	g := w.Generation
	ro := api.Rollout{Generation: g, Counts: api.RolloutCounts{Desired: 2, New: 2, NewReady: 1, Old: 1, OldReady: 1},
		Outcomes: map[int64]string{}, Failure: failure}
	if outcome != "" {
		ro.Outcomes[g] = outcome
	}
	if _, err := repo.WriteRollouts(ctx, []resources.RolloutWrite{{Namespace: "default", Name: "roll", Rollout: ro, MetaVersion: kv.Version}}); err != nil {
		t.Fatal(err)
	}
}

func writeRolloutDir(t *testing.T, replicas int) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "workload.kat"), []byte(strings.Replace(rolloutWorkload, "%d", itoa(replicas), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRolloutStatusAndApplyWait: katcall rollout status and apply --wait
// print the progress and exit 0 when the rollout succeeds, 1 when it fails
// (saying why) and 2 when the timeout passes first.
func TestRolloutStatusAndApplyWait(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	if _, err := c.repo.EnsureNamespace(context.Background(), "default", nil); err != nil {
		t.Fatal(err)
	}

	if code, _, errOut := c.katcall("rollout", "status", "default"); code == 0 || !strings.Contains(errOut, "NAMESPACE/NAME") {
		t.Errorf("rollout status without a name: exit %d, %q", code, errOut)
	}
	if code, out, errOut := c.katcall("apply", "-f", writeRolloutDir(t, 1)); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	// In progress: the timeout ends the wait.
	leaderWrites(t, c.repo, "", nil)
	code, out, errOut := c.katcall("rollout", "status", "default/roll", "--timeout", "1s")
	if code != exitRolloutTimedOut || !strings.Contains(out, "generation 1: new 1/2 ready (2 placed), old 1 (1 ready)") ||
		!strings.Contains(errOut, "did not end within 1s") {
		t.Errorf("rollout in progress: exit %d\n%s%s", code, out, errOut)
	}
	leaderWrites(t, c.repo, api.OutcomeSucceeded, nil)
	if code, out, errOut := c.katcall("rollout", "status", "default/roll"); code != 0 || !strings.Contains(out, "generation 1 successfully rolled out") {
		t.Errorf("rollout succeeded: exit %d\n%s%s", code, out, errOut)
	}

	// apply --wait follows generation 2 until the leader settles it.
	for _, tc := range []struct {
		name     string
		replicas int
		outcome  string
		failure  *api.RolloutFailure
		code     int
		says     string
	}{
		{"succeeded", 2, api.OutcomeSucceeded, nil, 0, "generation 2 successfully rolled out"},
		{"failed", 3, api.OutcomeFailed, &api.RolloutFailure{Generation: 3, Message: "generation 3 made no progress for 600s"},
			exitRolloutFailed, "the rollout of generation 3 failed: generation 3 made no progress for 600s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeRolloutDir(t, tc.replicas)
			done := make(chan [3]string, 1)
			go func() {
				code, out, errOut := c.katcall("apply", "-f", dir, "--wait", "--timeout", "1m")
				done <- [3]string{itoa(code), out, errOut}
			}()
			polltest.Until(t, 10*time.Second, "the new generation", func() bool {
				w, err := c.repo.GetWorkload(context.Background(), "default", "roll")
				return err == nil && w.Generation == int64(tc.replicas) // replicas 2 is generation 2, 3 is 3
			})
			leaderWrites(t, c.repo, tc.outcome, tc.failure)
			var got [3]string
			select {
			case got = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("apply --wait did not return")
			}
			if got[0] != itoa(tc.code) || !strings.Contains(got[1]+got[2], tc.says) {
				t.Errorf("apply --wait: exit %s, want %d saying %q\n%s%s", got[0], tc.code, tc.says, got[1], got[2])
			}
		})
	}
}

// TestHistoryAndRollbackCommands: katcall history -o json prints each
// generation's fields; rollback workload of a Git-owned workload applies
// the previous successful generation and says Git management is suspended.
func TestHistoryAndRollbackCommands(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	if _, err := c.repo.EnsureNamespace(ctx, "default", nil); err != nil {
		t.Fatal(err)
	}
	for i, replicas := range []int{1, 2} {
		q, err := quadlet.ParseWorkload(map[string][]byte{"workload.kat": []byte(strings.Replace(rolloutWorkload, "%d", itoa(replicas), 1))}, quadlet.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owner := api.Owner{Kind: api.OwnerGit, Source: "cfg", Path: "roll", Commit: "abcdef" + itoa(i)}
		if _, err := c.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: owner}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			leaderWrites(t, c.repo, api.OutcomeSucceeded, nil)
		}
	}
	code, out, errOut := c.katcall("history", "default/roll", "-o", "json")
	var h []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &h) != nil || len(h) != 2 {
		t.Fatalf("history -o json: exit %d\n%s%s", code, out, errOut)
	}
	for _, k := range []string{"generation", "specHash", "owner", "updatedAt", "outcome"} {
		if _, ok := h[1][k]; !ok {
			t.Errorf("history entry without %q: %v", k, h[1])
		}
	}
	if owner, _ := h[1]["owner"].(map[string]any); h[0]["outcome"] != "succeeded" || h[1]["outcome"] != "in progress" || owner["commit"] != "abcdef1" {
		t.Errorf("history = %v", h)
	}
	code, out, errOut = c.katcall("rollback", "workload", "default/roll")
	if code != 0 || !strings.Contains(out, "rolled back from generation 2 to generation 1's files (generation 3); Git management suspended, resume it with katcall resume") {
		t.Errorf("rollback: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = c.katcall("history", "default/roll")
	if code != 0 || !strings.Contains(out, "rolled back") || !strings.Contains(out, "rollback of 2 to 1's files") {
		t.Errorf("history table: exit %d\n%s", code, out)
	}
	if code, _, errOut := c.katcall("rollback", "workload", "default/roll", "--to-generation", "9"); code == 0 || !strings.Contains(errOut, "must be older") {
		t.Errorf("rollback to a future generation: exit %d %s", code, errOut)
	}
}

// TestRolloutProgressShowsDaemonSteps: a DaemonService's progress line has
// each node's step of the node-by-node update (and why a node failed), only
// for the generation being rolled out.
func TestRolloutProgressShowsDaemonSteps(t *testing.T) {
	st := &api.RolloutStatus{Asked: 3, Rollout: api.Rollout{Generation: 3,
		Nodes: []api.RolloutNode{{Node: "n1", New: 1, NewReady: 1}, {Node: "n2", New: 1, Old: 1}, {Node: "n3", Old: 1}}},
		Daemon: &api.DaemonRollout{TargetGeneration: 3, Nodes: []api.DaemonRolloutNode{
			{Node: "n1", Step: api.NodeStepVerified}, {Node: "n2", Step: api.NodeStepFailed, Message: "verify: exit 1\nmore"},
			{Node: "n3", Step: api.NodeStepPending}}}}
	got := rolloutProgress(st)
	for _, want := range []string{"node n1: new 1/1 ready, old 0, verified", "node n2: new 0/1 ready, old 1, failed (verify: exit 1)",
		"node n3: new 0/0 ready, old 1, pending"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lacks %q:\n%s", want, got)
		}
	}
	st.Daemon.TargetGeneration = 2 // an older update's record
	if got := rolloutProgress(st); strings.Contains(got, "verified") {
		t.Errorf("progress shows the steps of another generation:\n%s", got)
	}
}
