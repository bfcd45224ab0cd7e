package multinode

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestMemberDepartsWhileLeading: on a cluster of three etcd members, the
// member that leads departs (SIGUSR1): its Service instance runs on the
// other nodes, it leaves the etcd quorum (two voting members stay) and
// exits with status 10, another member leads, and the departed node is
// listed NotReady,Departed. It logs the time from the signal to the moved
// instance running and to the new leader.
func TestMemberDepartsWhileLeading(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "ld", hosts: 3, members: 3})
	c.apply(t, "mover", "Service", "\n  replicas: 3")
	c.waitRunning(t, time.Minute, "mover", "one running on every host", equal(1, 1, 1))
	leader := c.leaderIndex(t)
	name := c.Hosts[leader].Name
	signalled := time.Now()
	if err := c.agents[leader].Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	counts := c.waitRunning(t, 45*time.Second, "mover", "3 running on the members that stay, none on the departed leader", func(n []int) bool {
		return sum(n) == 3 && n[leader] == 0
	})
	moved := time.Since(signalled)
	err := c.agents[leader].Wait(t.Context())
	exited := time.Since(signalled)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 10 {
		t.Fatalf("the departed leader's agent ended with %v, want exit status 10", err)
	}
	if log := string(readFileOrEmpty(c.Hosts[leader].AgentLog())); !strings.Contains(log, "departing: left the etcd quorum") {
		t.Errorf("the departed leader's log does not say it left the etcd quorum; its end: %.500s", log[max(0, len(log)-500):])
	}
	next := -1
	polltest.UntilErr(t, 30*time.Second, "another member leads", func() error {
		nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Leader && n.Name != name {
				for i, h := range c.Hosts {
					if h.Name == n.Name {
						next = i
						return nil
					}
				}
			}
		}
		return fmt.Errorf("nodes %+v", nodes)
	})
	led := time.Since(signalled)
	token := strings.TrimSpace(string(readHostFile(t, c.Hosts[next], "admin.token")))
	web := memberHTTP(t, readHostFile(t, c.Hosts[next], filepath.Join("pki", "ca.crt")))
	polltest.UntilErr(t, 30*time.Second, "the new leader sees two etcd members", func() error {
		m, err := scrape(t, web, c.Hosts[next], token)
		if v, _ := sample(m, "kat_etcd_members"); err == nil && v != "2" {
			err = fmt.Errorf("kat_etcd_members %q", v)
		}
		return err
	})
	if st, err := c.nodeStatus(t, name); err != nil || st != "NotReady,Departed" {
		t.Errorf("katcall get nodes: %s is %q (%v), want NotReady,Departed", name, st, err)
	}
	t.Logf("the leader %s departed: its instance ran elsewhere %s after SIGUSR1 (running per host %v), it exited after %s, %s led after %s",
		name, moved.Round(time.Millisecond), counts, exited.Round(time.Millisecond), c.Hosts[next].Name, led.Round(time.Millisecond))
}
