package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// TestListJobRuns checks GET /v1alpha1/jobs: the runs the leader wrote, by
// namespace when asked, with the fields katcall shows, and a 400 naming the
// parameter for a bad namespace.
func TestListJobRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	start := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	done := start.Add(time.Minute)
	runs := []resources.JobRunWrite{
		{Run: api.JobRun{Namespace: "default", Name: "report", Run: "g1", Generation: 1, State: api.RunSucceeded,
			Reason: api.RunReasonCompleted, Succeeded: 2, StartTime: start, CompletionTime: &done, Completions: 2, Parallelism: 1}},
		{Run: api.JobRun{Namespace: "batch", Name: "cron", Run: "20261124T1001Z", State: api.RunRunning, Active: 1,
			StartTime: start, Completions: 1, Parallelism: 1}},
	}
	if ok, _, err := f.repo.WriteJobRuns(ctx, runs, nil, nil); err != nil || !ok {
		t.Fatalf("write runs: %v %v", ok, err)
	}
	all, err := f.client.ListJobRuns(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Namespace != "batch" || all[1].Run != "g1" || all[1].CompletionTime == nil || !all[1].CompletionTime.Equal(done) {
		t.Fatalf("runs = %+v", all)
	}
	def, err := f.client.ListJobRuns(ctx, "default")
	if err != nil || len(def) != 1 || def[0].Name != "report" {
		t.Fatalf("runs of default = %+v, %v", def, err)
	}
	// The wire form has every field katcall get jobs -o json promises.
	b, _ := json.Marshal(all[0])
	for _, field := range []string{"namespace", "name", "run", "state", "succeeded", "failed", "active", "startTime", "completionTime", "reason"} {
		if !strings.Contains(string(b), `"`+field+`"`) {
			t.Errorf("run JSON lacks %q: %s", field, b)
		}
	}
	code, e := f.raw(t, http.MethodGet, "/v1alpha1/jobs?namespace=Bad_NS", token, nil)
	if code != http.StatusBadRequest || !strings.Contains(e.Message, "namespace") {
		t.Errorf("bad namespace: %d %+v", code, e)
	}
	if code, _ := f.raw(t, http.MethodGet, "/v1alpha1/jobs", "", nil); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}
}
