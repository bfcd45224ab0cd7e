package apiserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/runtime"
)

// TestExecThroughTheLeader runs a command in an instance through the API
// server and the agent API: its input reaches it, its output and exit
// status come back, the audit log records the instance and the command,
// and bad requests are refused before anything runs.
func TestExecThroughTheLeader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan []string, 10)
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(context.Context, string, api.LogOptions, io.Writer) error { return nil },
		Exec: func(_ context.Context, id string) (apiserver.ExecFunc, error) {
			if id != "web-1" {
				return nil, fmt.Errorf("%w: %s", apiserver.ErrUnknownInstance, id)
			}
			return func(_ context.Context, cmd []string, eio runtime.ExecIO) (int, error) {
				ran <- cmd
				if cmd[0] == "fail" {
					return 0, errors.New("podman exec: container is not running")
				}
				in := []byte("(no input)")
				if eio.Stdin != nil {
					var err error
					if in, err = io.ReadAll(eio.Stdin); err != nil {
						return 0, err
					}
				}
				fmt.Fprintf(eio.Stdout, "%s read %q tty=%v", strings.Join(cmd, " "), in, eio.TTY)
				fmt.Fprint(eio.Stderr, "to stderr")
				return 3, nil
			}, nil
		},
	})
	a := api.Assignment{InstanceID: "web-1", Node: "n1", Namespace: "default", Workload: "web", Image: "img", CreatedAt: time.Now()}
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{a}, nil); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Instance: "web-1", Command: []string{"cat", "-n"},
		Stdin: strings.NewReader("hello"), Stdout: &stdout, Stderr: &stderr})
	if err != nil || code != 3 || stdout.String() != `cat -n read "hello" tty=false` || stderr.String() != "to stderr" {
		t.Fatalf("exec = %d, %v; stdout %q, stderr %q", code, err, stdout.String(), stderr.String())
	}
	if got := <-ran; strings.Join(got, " ") != "cat -n" {
		t.Fatalf("the agent ran %q", got)
	}
	// Without ?instance the first running instance; the node has not
	// reported it running yet.
	if _, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Command: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard}); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("exec with no running instance: %v, want 404", err)
	}
	if err := f.client.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), WorkloadInstances: []api.InstanceStatus{
		{InstanceID: "web-1", Phase: api.InstanceRunning, State: "running"}}}); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Command: []string{"ls"}, TTY: true, Stdout: &stdout, Stderr: io.Discard}); err != nil || code != 3 ||
		stdout.String() != `ls read "(no input)" tty=true` {
		t.Fatalf("exec in the running instance = %d, %v, %q", code, err, stdout.String())
	}
	<-ran
	// A command that cannot run is an error naming why, not an exit status.
	if _, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Command: []string{"fail"}, Stdout: io.Discard, Stderr: io.Discard}); !errors.Is(err, apiclient.ErrExecFailed) ||
		!strings.Contains(err.Error(), "container is not running") {
		t.Fatalf("exec that fails: %v", err)
	}
	<-ran
	if _, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Instance: "web-9", Command: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard}); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("exec in an unknown instance: %v, want 404", err)
	}

	// The audit log has who ran what where, and not the output. An exec's
	// entry is written when its session is answered in full, which may come
	// after the client has read the exit status (and made its next call):
	// wait for every call's entry, in any order.
	want := []string{`admin instance web-1: ["cat" "-n"]`, `admin instance web-1: ["ls"]`, `admin instance web-1: ["fail"]`,
		"admin ", "admin "} // the two 404s named no instance that runs
	slices.Sort(want)
	var execs []string
	polltest.UntilErr(t, 10*time.Second, "an audit entry of each exec call", func() error {
		es, err := f.client.ListAudit(ctx, api.AuditQuery{Resource: "workload/default/web"})
		if err != nil {
			return err
		}
		execs = execs[:0]
		for _, e := range es {
			if e.Verb == "exec" {
				execs = append(execs, e.Actor+" "+e.Detail)
			}
		}
		slices.Sort(execs)
		if !slices.Equal(execs, want) {
			return fmt.Errorf("audit entries of exec: %q, want %q", execs, want)
		}
		return nil
	})
	if strings.Contains(strings.Join(execs, "\n"), "read") {
		t.Fatalf("audit entries of exec hold the output: %q", execs)
	}

	// Refused before anything runs: no token, no upgrade, no command.
	for _, tc := range []struct {
		name, path, bearer string
		want               int
	}{
		{"no token", "/v1alpha1/n/default/workloads/web/exec?command=true", "", http.StatusUnauthorized},
		{"no upgrade", "/v1alpha1/n/default/workloads/web/exec?command=true", token, http.StatusUpgradeRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, e := f.raw(t, http.MethodPost, tc.path, tc.bearer, nil); code != tc.want {
				t.Fatalf("%d %q, want %d", code, e.Message, tc.want)
			}
		})
	}
	if _, err := f.client.Exec(ctx, "default", "web", apiclient.ExecRequest{Command: []string{""}, Stdout: io.Discard, Stderr: io.Discard}); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("exec of an empty command: %v, want 400", err)
	}
	select {
	case cmd := <-ran:
		t.Fatalf("a refused request ran %q", cmd)
	default:
	}
}
