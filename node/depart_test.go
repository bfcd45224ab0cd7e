package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestRequestDeparture: kat-agent depart reaches the running agent through
// its control socket, which departs as SIGUSR1 makes it: the leader is
// told, and the command returns once the node's Service instance is no
// longer assigned, with what the agent did. Without a running agent it says
// so; an unknown command is refused.
func TestRequestDeparture(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	repo := resources.New(storetest.New(t))
	must(t, repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", UID: "u1"}))
	svc := api.Assignment{InstanceID: "web-1-a", Node: "n1", Namespace: "ns1", Workload: "web", Type: quadlet.TypeService}
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{svc}, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := RequestDeparture(ctx, dir, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "is it running?") {
		t.Fatalf("depart without a running agent: %v, want an error asking whether it runs", err)
	}

	n := &Node{dir: dataDir(dir), state: &nodeState{NodeName: "n1"}, log: zerolog.Nop(), repo: repo}
	d := newDeparture()
	runCtx, stop := context.WithCancel(ctx)
	served, departed := make(chan error, 1), make(chan error, 1)
	go func() { served <- n.serveControl(runCtx, d) }()
	go func() {
		departed <- n.runDeparture(runCtx, d, agent.DepartConfig{Node: "n1", Facts: resources.NewNodeFacts(repo, nil), Repo: repo})
	}()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serveControl: %v", err)
		}
	}()
	var conn net.Conn
	polltest.Until(t, 10*time.Second, "the control socket listening", func() bool {
		c, err := net.Dial("unix", n.dir.controlSocket())
		conn = c
		return err == nil
	})
	if _, err := io.WriteString(conn, "bogus\n"); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(conn)
	conn.Close()
	if err != nil || !strings.Contains(string(reply), `failed: unknown command "bogus"`) {
		t.Fatalf("an unknown command: %q, %v; want it refused", reply, err)
	}

	var out bytes.Buffer
	requested := make(chan error, 1)
	go func() { requested <- RequestDeparture(ctx, dir, &out) }()
	polltest.Until(t, 10*time.Second, "the departure recorded", func() bool {
		reg, err := repo.GetNodeRegistration(ctx, "n1")
		return err == nil && reg.DepartedAt != nil
	})
	select {
	case err := <-requested:
		t.Fatalf("kat-agent depart returned %v while the Service instance is assigned", err)
	default:
	}
	if _, err := repo.WriteAssignments(ctx, nil, []api.Assignment{svc}); err != nil {
		t.Fatal(err)
	}
	if err := <-requested; err != nil {
		t.Fatalf("kat-agent depart: %v (printed %q)", err, out.String())
	}
	if got := out.String(); !strings.Contains(got, "departing") || !strings.Contains(got, "the node departed") {
		t.Errorf("kat-agent depart printed %q, want the progress and the end", got)
	}
	if err := <-departed; !errors.Is(err, agent.ErrDeparted) || d.departed() == nil {
		t.Errorf("the departure ended with %v, want ErrDeparted", err)
	}
}

// TestOpenRefusesAMemberThatLeftTheQuorum: the data directory of a member
// that departed and left the etcd quorum does not start again (its etcd
// member is gone), and says how to bring the node back.
func TestOpenRefusesAMemberThatLeftTheQuorum(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := testOptions(t, dir)
	must(t, os.MkdirAll(o.DataDir, 0o700))
	must(t, saveNodeState(dataDir(o.DataDir), &nodeState{NodeName: "n1", Role: roleMember, LeftQuorum: true}))
	o.Join = true
	_, err := Open(t.Context(), o, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "left the etcd quorum: to bring the node back, join it again from an empty data directory") {
		t.Fatalf("Open of a member that left the quorum: %v, want a refusal saying how to come back", err)
	}
}
