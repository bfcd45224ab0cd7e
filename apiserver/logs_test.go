package apiserver_test

import (
	"bufio"
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

// TestFollowedLogsResumeABrokenStream: following every instance, a stream
// the agent's side breaks (its agent restarted) is read again after the
// last line it gave, with a line that says so, and no line twice; the
// lines keep no timestamp the client did not ask for.
func TestFollowedLogsResumeABrokenStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	stamp := func(s int) string { return t0.Add(time.Duration(s) * time.Millisecond).Format(time.RFC3339Nano) }
	calls := make(chan api.LogOptions, 4)
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(ctx context.Context, _ string, o api.LogOptions, w io.Writer) error {
			calls <- o
			text := stamp(1) + " one\n" + stamp(2) + " two\n"
			if !o.Since.IsZero() { // resumed: podman's since includes the last line
				text = stamp(2) + " two\n" + stamp(3) + " three\n"
			}
			if _, err := io.WriteString(w, text); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		},
	})
	lines := followWeb1(ctx, t, f, apiclient.LogQuery{All: true, Follow: true})
	next := func() string {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the followed log ended: %v", lines.Err())
		}
		return lines.Text()
	}
	for _, want := range []string{"[web-1] one", "[web-1] two"} {
		if got := next(); got != want {
			t.Fatalf("followed line %q, want %q", got, want)
		}
	}
	if o := <-calls; !o.Follow || !o.Timestamps || !o.Since.IsZero() {
		t.Fatalf("first read %+v, want follow and timestamps from the start", o)
	}
	f.agent.CloseClientConnections() // the agent goes away mid-stream
	if got := next(); !strings.HasPrefix(got, "[web-1] log stream interrupted (") || !strings.HasSuffix(got, "): resuming") {
		t.Fatalf("after the break: %q, want a line saying the stream is resumed", got)
	}
	if got := next(); got != "[web-1] three" {
		t.Fatalf("after the resumption: %q, want the line after the last one read, once", got)
	}
	if o := <-calls; !o.Follow || !o.Since.Equal(t0.Add(2*time.Millisecond)) || o.Tail != 0 {
		t.Fatalf("resumed read %+v, want follow since the last line", o)
	}
}

// TestFollowedLogsWaitForAnInstanceToStart: following every instance, an
// instance whose log cannot be read yet (its container is not there) is
// asked again, with the options first given, until it can be read.
func TestFollowedLogsWaitForAnInstanceToStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan api.LogOptions, 4)
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(ctx context.Context, id string, o api.LogOptions, w io.Writer) error {
			calls <- o
			if len(calls) == 1 { // the first call (the test reads calls at the end)
				return fmt.Errorf("%w: %s", apiserver.ErrUnknownInstance, id)
			}
			if _, err := io.WriteString(w, time.Now().UTC().Format(time.RFC3339Nano)+" started\n"); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		},
	})
	lines := followWeb1(ctx, t, f, apiclient.LogQuery{All: true, Follow: true, Tail: 3})
	for _, want := range []string{"[web-1] log stream interrupted (instance web-1 does not run on this node): resuming", "[web-1] started"} {
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("followed line %q, %v; want %q", lines.Text(), lines.Err(), want)
		}
	}
	for range 2 {
		if o := <-calls; o.Tail != 3 || !o.Since.IsZero() {
			t.Fatalf("read %+v, want the tail first asked for", o)
		}
	}
}

// followWeb1 assigns instance web-1 of default/web to node n1 and follows
// the workload's logs as q asks until ctx ends, line by line.
func followWeb1(ctx context.Context, t *testing.T, f *fixture, q apiclient.LogQuery) *bufio.Scanner {
	t.Helper()
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{{InstanceID: "web-1", Node: "n1", Namespace: "default", Workload: "web",
		Image: "img", CreatedAt: time.Now()}}, nil); err != nil {
		t.Fatal(err)
	}
	r, w := io.Pipe()
	go func() { w.CloseWithError(f.client.LogsMatching(ctx, "default", "web", q, w)) }()
	return bufio.NewScanner(r)
}
