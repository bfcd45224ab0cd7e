package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestNodeNetworkHeldThenFreed: a stale Podman network that holds the
// node's subnet keeps the agent from making the node's network (as a
// network left behind by an earlier cluster did). A workload applied
// meanwhile waits, its instances reporting NodeRetry, and its rollout,
// whose progress deadline is 4 s, does not fail however long that lasts;
// once the stale network is gone, the agent makes its network again and
// the instances run without waiting out any back-off.
func TestNodeNetworkHeldThenFreed(t *testing.T) {
	requirePodman(t)
	t.Parallel()
	c := StartTestCluster(t)
	waitNodeNetwork(t, c.Node)
	network := NetworkName(c.Node)
	subnet := strings.TrimSpace(podman(t, "network", "inspect", network, "--format", "{{range .Subnets}}{{.Subnet}}{{end}}"))
	stale := "kat-stale-" + randomHex(3)
	podman(t, "network", "rm", "--force", network)
	podman(t, "network", "create", "--subnet", subnet, stale)
	t.Cleanup(func() { _ = exec.Command("podman", "network", "rm", "--force", stale).Run() })
	// The agent finds its network gone at its next resync and cannot
	// make it again.
	polltest.Until(t, time.Minute, "the agent failing to make its network", func() bool {
		return strings.Contains(agentLog(c, 200), "instances with overlay addresses wait for the node's network")
	})

	name := "held-" + randomHex(3)
	files := sleeper(name, 2)
	files["workload.kat"] = strings.Replace(files["workload.kat"], "  restartPolicy:", "  updateStrategy: {progressDeadlineSeconds: 4}\n  restartPolicy:", 1)
	mustApply(t, c, writeWorkload(t, files))
	client := clientFor(t, c)
	waitStatus(t, c, "default/"+name, "both instances waiting on the node", func(d *api.WorkloadDetail) bool {
		waiting := 0
		for _, in := range d.Instances {
			if in.Status.NodeRetry && strings.Contains(in.Status.Message, "network") {
				waiting++
			}
		}
		return waiting == 2
	})
	// The deadline holds: ProgressAt moves on every half deadline, three
	// moves are more than a deadline.
	var last time.Time
	moves := 0
	polltest.UntilEvery(t, time.Minute, 200*time.Millisecond, "the rollout's deadline held three times", func() bool {
		ro, err := client.WorkloadRollout(t.Context(), "default", name, 1)
		if err != nil {
			return false
		}
		if ro.Outcome == api.OutcomeFailed || ro.Rollout.Failure != nil {
			t.Fatalf("the rollout failed while its instances waited on the node: %+v", ro.Rollout.Failure)
		}
		switch p := ro.Rollout.ProgressAt; {
		case last.IsZero():
			last = p
		case p.After(last):
			last, moves = p, moves+1
		}
		return moves >= 3
	})

	freed := time.Now()
	podman(t, "network", "rm", "--force", stale)
	waitStatus(t, c, "default/"+name, "ready 2/2", func(d *api.WorkloadDetail) bool { return d.Status.Ready == 2 })
	t.Logf("both instances ready %s after the stale network was removed (a failed step the node caused waits at most 5 s)",
		time.Since(freed).Round(time.Millisecond))
	ro, err := client.WorkloadRollout(t.Context(), "default", name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if ro.Outcome == api.OutcomeFailed {
		t.Errorf("rollout outcome %s, want it not failed: %+v", ro.Outcome, ro.Rollout.Failure)
	}
}
