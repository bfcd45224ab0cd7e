package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
)

// TestLogsOptionsAndAllInstances checks that the log options reach the
// agent, that ?all=true writes every instance's lines with its prefix, and
// that bad options are refused naming the parameter.
func TestLogsOptionsAndAllInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(_ context.Context, id string, o api.LogOptions, w io.Writer) error {
			if id == "web-2" && o.Previous {
				return fmt.Errorf("%w: %s", apiserver.ErrNoPreviousRun, id)
			}
			since := "-"
			if !o.Since.IsZero() {
				since = o.Since.UTC().Format(time.RFC3339)
			}
			_, err := fmt.Fprintf(w, "%s tail=%d since=%s timestamps=%v previous=%v\nsecond line of %s", id, o.Tail, since, o.Timestamps, o.Previous, id)
			return err
		},
	})
	var as []api.Assignment
	for _, id := range []string{"web-1", "web-2"} {
		as = append(as, api.Assignment{InstanceID: id, Node: "n1", Namespace: "default", Workload: "web", Image: "img", CreatedAt: time.Now()})
	}
	if _, err := f.repo.WriteAssignments(ctx, as, nil); err != nil {
		t.Fatal(err)
	}
	logs := func(q apiclient.LogQuery) (string, error) {
		var buf bytes.Buffer
		err := f.client.LogsMatching(ctx, "default", "web", q, &buf)
		return buf.String(), err
	}
	tests := []struct {
		name string
		q    apiclient.LogQuery
		want string
	}{
		{name: "one instance with options", q: apiclient.LogQuery{Instance: "web-2", Tail: 5, Since: "2026-01-02T03:04:05Z", Timestamps: true},
			want: "web-2 tail=5 since=2026-01-02T03:04:05Z timestamps=true previous=false\nsecond line of web-2"},
		{name: "previous", q: apiclient.LogQuery{Instance: "web-1", Previous: true},
			want: "web-1 tail=0 since=- timestamps=false previous=true\nsecond line of web-1"},
		{name: "all instances, prefixed", q: apiclient.LogQuery{All: true, Tail: 1}, want: "" +
			"[web-1] web-1 tail=1 since=- timestamps=false previous=false\n[web-1] second line of web-1\n" +
			"[web-2] web-2 tail=1 since=- timestamps=false previous=false\n[web-2] second line of web-2\n"},
		{name: "all instances, one without a previous run", q: apiclient.LogQuery{All: true, Previous: true}, want: "" +
			"[web-1] web-1 tail=0 since=- timestamps=false previous=true\n[web-1] second line of web-1\n" +
			"[web-2] cannot read the log: instance web-2 has no previous run: its container has not restarted\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := logs(tc.q)
			if err != nil || got != tc.want {
				t.Fatalf("logs = %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
	if _, err := logs(apiclient.LogQuery{Instance: "web-2", Previous: true}); !isStatus(err, http.StatusNotFound) ||
		!strings.Contains(err.Error(), "no previous run") {
		t.Fatalf("previous of an instance that never restarted: %v, want 404 saying so", err)
	}
	// A since duration counts back from the server's clock.
	got, err := logs(apiclient.LogQuery{Instance: "web-1", Since: "1h"})
	if err != nil || strings.Contains(got, "since=-") {
		t.Fatalf("since 1h: %q, %v", got, err)
	}
	f.refusesNaming(t, "/v1alpha1/n/default/workloads/web/logs?", []badQuery{
		{"tail=-1", "tail"},
		{"tail=x", "tail"},
		{"since=later", "since"},
		{"timestamps=yes-please", "timestamps"},
		{"previous=true&follow=true", "previous"},
		{"all=true&instance=web-1", "all"},
	})
}
