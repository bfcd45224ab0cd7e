package gitsync

import (
	"fmt"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
)

// TestSyncMetricsPerSource: a source that syncs counts successful fetches
// and syncs under its name; one whose repository is missing counts
// failures. Each source's name is its own, so parallel tests do not mix in.
func TestSyncMetricsPerSource(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	_, url := newGitServer(t, r)
	r.workload("apps/web", "default", "web", 1)
	c1 := r.Commit("first", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{Name: "metrics-ok", URL: url})
	e.addSource(api.SourceSpec{Name: "metrics-missing", URL: url + "-missing"})
	e.waitApplied("metrics-ok", c1)

	atLeastOne := func(family, source, result string) func() string {
		return func() string {
			v, err := metrics.Value(family, map[string]string{"source": source, "result": result})
			if err != nil || v < 1 {
				return fmt.Sprintf("%s{source=%q,result=%q} = %v (%v)", family, source, result, v, err)
			}
			return ""
		}
	}
	for _, c := range []struct{ family, source, result string }{
		{"kat_gitsync_fetch_duration_seconds", "metrics-ok", metrics.ResultSuccess},
		{"kat_gitsync_sync_duration_seconds", "metrics-ok", metrics.ResultSuccess},
		{"kat_gitsync_fetch_duration_seconds", "metrics-missing", metrics.ResultFailure},
		{"kat_gitsync_sync_duration_seconds", "metrics-missing", metrics.ResultFailure},
	} {
		e.eventually(c.family+" of "+c.source, atLeastOne(c.family, c.source, c.result))
	}
	for _, c := range []struct{ family, source, result string }{
		{"kat_gitsync_fetch_duration_seconds", "metrics-ok", metrics.ResultFailure},
		{"kat_gitsync_fetch_duration_seconds", "metrics-missing", metrics.ResultSuccess},
	} {
		if v, _ := metrics.Value(c.family, map[string]string{"source": c.source, "result": c.result}); v != 0 {
			t.Errorf("%s{source=%q,result=%q} = %v, want 0", c.family, c.source, c.result, v)
		}
	}
}
