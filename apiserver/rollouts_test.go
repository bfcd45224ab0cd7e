package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// settle writes the rollout record the leader would: outcomes by generation.
func (f *fixture) settle(t *testing.T, name string, outcomes map[int64]string) {
	t.Helper()
	ctx := context.Background()
	kv, err := f.st.Get(ctx, resources.MetaKey("default", name))
	if err != nil {
		t.Fatal(err)
	}
	w, err := f.repo.GetWorkload(ctx, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	ro := api.Rollout{Generation: w.Generation, Outcomes: outcomes}
	if _, err := f.repo.WriteRollouts(ctx, []resources.RolloutWrite{{Namespace: "default", Name: name, Rollout: ro, MetaVersion: kv.Version}}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) applyAs(t *testing.T, name string, replicas int, owner api.Owner) {
	t.Helper()
	if _, err := f.repo.ApplyWorkload(context.Background(), resources.ApplyRequest{
		Quadlet: mustParse(t, workloadKat(name, "default", replicas)), Owner: owner}); err != nil {
		t.Fatal(err)
	}
}

func outcomes(h []api.HistoryEntry) string {
	var s []string
	for _, e := range h {
		s = append(s, e.Outcome)
	}
	return strings.Join(s, ",")
}

// TestHistoryAndRollback: history lists each archived generation with its
// outcome; rollback applies the previous successful generation's files (or
// those of the one asked for) as a new generation, suspending the Git
// management of a Git-owned workload and saying so; bad requests are
// refused with a 4xx and change nothing.
func TestHistoryAndRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	git := func(commit string) api.Owner {
		return api.Owner{Kind: api.OwnerGit, Source: "cfg", Path: "web", Commit: commit}
	}
	f.applyAs(t, "web", 1, git("c1"))
	f.applyAs(t, "web", 2, git("c2"))
	f.applyAs(t, "web", 3, git("c3"))
	f.settle(t, "web", map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeSucceeded})

	// The JSON fields katcall history -o json prints.
	resp, err := f.srv.Client().Do(authed(t, http.MethodGet, f.srv.URL+"/v1alpha1/n/default/workloads/web/history"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var raw []map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 3 {
		t.Fatalf("history = %s (%v)", b, err)
	}
	for _, k := range []string{"generation", "specHash", "owner", "updatedAt", "outcome"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("history entry has no %q: %v", k, raw[0])
		}
	}
	if owner, _ := raw[2]["owner"].(map[string]any); owner["commit"] != "c3" || raw[2]["outcome"] != "in progress" {
		t.Errorf("generation 3 = %v", raw[2])
	}

	before := f.snapshot(t)
	for _, tc := range []struct {
		query string
		code  int
		msg   string
	}{
		{"?toGeneration=abc", http.StatusBadRequest, `"abc" is not a generation`},
		{"?toGeneration=3", http.StatusBadRequest, "must be older than the current generation 3"},
		{"?toGeneration=7", http.StatusBadRequest, "must be older"},
	} {
		code, e := f.raw(t, http.MethodPost, "/v1alpha1/n/default/workloads/web/rollback"+tc.query, token, nil)
		if code != tc.code || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("rollback%s = %d %q, want %d saying %q", tc.query, code, e.Message, tc.code, tc.msg)
		}
	}
	if after := f.snapshot(t); after != before {
		t.Errorf("refused rollbacks changed the state:\n%s\nwas\n%s", after, before)
	}

	res, err := f.client.RollbackWorkload(ctx, "default", "web", 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 3 || res.To != 2 || res.Workload.Generation != 4 || !res.GitSuspended || !res.Workload.Suspended {
		t.Fatalf("rollback = %+v", res)
	}
	if w, _ := f.repo.GetWorkload(ctx, "default", "web"); w.Rollback == nil || *w.Rollback != (api.RollbackRef{From: 3, To: 2}) {
		t.Errorf("generation 4's meta: rollback %+v", w.Rollback)
	}
	f.settle(t, "web", map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeSucceeded, 4: api.OutcomeSucceeded})
	res, err = f.client.RollbackWorkload(ctx, "default", "web", 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 4 || res.To != 1 || res.Workload.Generation != 5 {
		t.Fatalf("rollback to 1 = %+v", res)
	}
	h, err := f.client.WorkloadHistory(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if got := outcomes(h); got != "succeeded,succeeded,rolled back,rolled back,in progress" {
		t.Errorf("history outcomes = %s", got)
	}
	if h[4].Rollback == nil || h[4].Rollback.To != 1 {
		t.Errorf("generation 5 = %+v, want a rollback to 1", h[4])
	}
	ro, err := f.client.WorkloadRollout(ctx, "default", "web", 3)
	if err != nil || ro.Generation != 5 || ro.Asked != 3 || ro.Outcome != api.OutcomeRolledBack {
		t.Errorf("rollout of generation 3 = %+v, %v", ro, err)
	}
	// Generation 1's spec is what runs: going there again is a conflict.
	if _, err := f.client.RollbackWorkload(ctx, "default", "web", 1); statusOf(err) != http.StatusConflict {
		t.Errorf("rollback to the running spec: %v, want 409", err)
	}

	// A workload that never rolled out successfully has nothing to go to.
	f.applyAs(t, "new", 1, api.APIOwner())
	f.applyAs(t, "new", 2, api.APIOwner())
	_, err = f.client.RollbackWorkload(ctx, "default", "new", 0)
	if statusOf(err) != http.StatusNotFound || !strings.Contains(err.Error(), "no earlier generation rolled out successfully") {
		t.Errorf("rollback without a success: %v", err)
	}
	if _, err := f.client.RollbackWorkload(ctx, "default", "absent", 0); statusOf(err) != http.StatusNotFound {
		t.Errorf("rollback of an absent workload: %v", err)
	}
}

func authed(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}
