package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// syncBuffer is a bytes.Buffer for one writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGetEventsFiltersAndWatch: katcall get events passes its filters on,
// names a bad one, and --watch prints events recorded after it started.
func TestGetEventsFiltersAndWatch(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	for _, ev := range []api.Event{
		api.WorkloadRef("default", "web", "u1").Event(api.EventNormal, "Created", "created through the API"),
		api.WorkloadRef("other", "web", "u2").Event(api.EventWarning, "BuildFailed", "boom"),
		api.NodeRef("n1", "").Event(api.EventNormal, "NodeReady", "ready"),
	} {
		if err := c.repo.AppendEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		want []string // reasons shown
	}{
		{name: "all", args: nil, want: []string{"Created", "BuildFailed", "NodeReady"}},
		{name: "name and namespace", args: []string{"web", "-n", "default"}, want: []string{"Created"}},
		{name: "object form", args: []string{"workload/other/web"}, want: []string{"BuildFailed"}},
		{name: "kind", args: []string{"--kind", "node"}, want: []string{"NodeReady"}},
		{name: "type", args: []string{"--type", "Warning"}, want: []string{"BuildFailed"}},
		{name: "since", args: []string{"--since", "1h", "--limit", "1"}, want: []string{"NodeReady"}},
	}
	all := []string{"Created", "BuildFailed", "NodeReady"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := c.katcall(append([]string{"get", "events"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, r := range all {
				if shown, want := strings.Contains(out, r), strings.Contains(strings.Join(tc.want, " "), r); shown != want {
					t.Fatalf("%s shown %v, want %v:\n%s", r, shown, want, out)
				}
			}
		})
	}
	for _, bad := range [][]string{{"--type", "Fatal"}, {"--kind", "pod"}, {"--since", "soon"}} {
		if code, _, errOut := c.katcall(append([]string{"get", "events"}, bad...)...); code == 0 || !strings.Contains(errOut, strings.TrimPrefix(bad[0], "--")) {
			t.Fatalf("get events %v: exit %d, %q; want an error naming the flag", bad, code, errOut)
		}
	}
	if code, _, errOut := c.katcall("get", "workloads", "--watch"); code == 0 || !strings.Contains(errOut, "--watch") {
		t.Fatalf("get workloads --watch: exit %d, %q", code, errOut)
	}

	wctx, cancel := context.WithCancel(ctx)
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(wctx, []string{"--config", c.config, "get", "events", "--watch", "--kind", "workload", "-o", "json"}, &out, &errOut)
	}()
	polltest.Until(t, 10*time.Second, "the existing workload events", func() bool { return strings.Contains(out.String(), "BuildFailed") })
	if err := c.repo.RecordEvent(ctx, api.WorkloadRef("default", "db", ""), api.EventNormal, "Deleted", "deleted"); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the new event", func() bool { return strings.Contains(out.String(), `"reason":"Deleted"`) })
	cancel()
	if code := <-done; code != 0 || strings.Contains(out.String(), "NodeReady") {
		t.Fatalf("watch: exit %d, stderr %q, stdout:\n%s", code, errOut.String(), out.String())
	}
}

// TestLogsAndExecFlags: flag combinations that cannot work are refused
// before any call.
func TestLogsAndExecFlags(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "default/web", "--previous", "-f"}, "--previous"},
		{[]string{"logs", "default/web", "--all", "--instance", "web-1"}, "--all"},
		{[]string{"logs", "default/web", "--tail", "-2"}, "--tail"},
		{[]string{"logs", "default/web", "--build", "--tail", "2"}, "--tail"},
		{[]string{"exec", "default/web"}, "arg"},
		{[]string{"exec", "default/web", "--instance"}, "--instance"},
	} {
		if code, _, errOut := c.katcall(tc.args...); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("katcall %v: exit %d, %q; want an error naming %s", tc.args, code, errOut, tc.want)
		}
	}
}
