package multinode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/harness"
)

// failoverKills is how many times TestQuorum kills the leader.
const failoverKills = 5

// TestQuorum runs a cluster of three etcd members (node2 and node3 join
// with --etcd-peer) and a worker (node4), and kills the leader's kat-agent with SIGKILL again and
// again: another member must lead and serve the API, and the killed one
// rejoins as a follower when it restarts. Then two of the three members die:
// writes stop with a clear error, and everything is there when they return.
func TestQuorum(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	const members = 3
	hooks := newHookRepos(t)
	c := startCluster(t, clusterSpec{name: "qm", hosts: members + 1, noImage: true, members: members, hooks: hooks})
	token := strings.TrimSpace(string(readHostFile(t, c.Hosts[0], "admin.token")))
	caPEM := readHostFile(t, c.Hosts[0], filepath.Join("pki", "ca.crt"))
	web := memberHTTP(t, caPEM)
	// client reaches host i's API only: no failing over to another
	// member, so that what each member answers shows.
	client := func(i int) *apiclient.Client {
		cl, err := apiclient.New(apiclient.Config{
			Server: "https://" + netip.AddrPortFrom(c.Hosts[i].Addr, harness.APIPort).String(),
			Token:  token, CAData: caPEM, Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}

	t.Run("three etcd members, one leader, every member's API answers", func(t *testing.T) {
		nodes := c.nodes(t)
		var leaders []string
		for i, n := range nodes {
			if n.EtcdMember != (i < members) {
				t.Errorf("node %s: etcd member %v, want %v", n.Name, n.EtcdMember, i < members)
			}
			if n.Leader {
				leaders = append(leaders, n.Name)
			}
		}
		// Which member leads depends on the elections while the members
		// joined (the leader campaigns again once its quorum has several
		// members).
		if len(nodes) != members+1 || len(leaders) != 1 {
			t.Fatalf("nodes %+v with leaders %v, want node1 to node4, one leading", nodes, leaders)
		}
		table := c.katcall(t, "get", "nodes")
		for i, n := range nodes {
			role := "agent"
			switch {
			case n.Leader:
				role = "leader"
			case i < members:
				role = "member"
			}
			if !regexpLine(table, n.Name, role) {
				t.Errorf("katcall get nodes shows %s not as %s:\n%s", n.Name, role, table)
			}
		}
		// A member that does not lead forwards to the leader.
		for i := range members {
			got, err := client(i).ListNodes(t.Context())
			if err != nil || len(got) != members+1 {
				t.Errorf("list nodes through %s: %d nodes, %v; want the leader's 4", c.Hosts[i].Name, len(got), err)
			}
		}
		// Every member that joined wrote a katcall.yaml listing the
		// members' APIs, its own first.
		for i := 1; i < 3; i++ {
			var kc struct {
				Server  string   `yaml:"server"`
				Servers []string `yaml:"servers"`
			}
			if err := yaml.Unmarshal(readHostFile(t, c.Hosts[i], "katcall.yaml"), &kc); err != nil {
				t.Fatal(err)
			}
			self := "https://" + netip.AddrPortFrom(c.Hosts[i].Addr, harness.APIPort).String()
			if kc.Server != self || !slices.Contains(kc.Servers, "https://"+netip.AddrPortFrom(c.Hosts[0].Addr, harness.APIPort).String()) {
				t.Errorf("%s's katcall.yaml: server %s, servers %v; want %s first and node1's API among the others", c.Hosts[i].Name, kc.Server, kc.Servers, self)
			}
		}
		// Every member's API port serves its own metrics: one says it
		// leads, and each sees the three etcd members.
		leading := 0
		for i := range members {
			m, err := scrape(t, web, c.Hosts[i], token)
			if err != nil {
				t.Error(err)
				continue
			}
			if v, _ := sample(m, "kat_leader"); v == "1" {
				leading++
			}
			if v, _ := sample(m, "kat_etcd_members"); v != "3" {
				t.Errorf("%s's API /metrics: kat_etcd_members %q, want 3", c.Hosts[i].Name, v)
			}
		}
		if leading != 1 {
			t.Errorf("%d members' API /metrics say kat_leader 1, want 1: a member that does not lead must answer with its own", leading)
		}
		// The leader resolves the app repository of a workload built
		// from Git.
		c.applyApp(t, hooks)
		want := hooks.app.head(t)
		polltest.UntilErr(t, time.Minute, "the leader resolves default/app's branch", func() error {
			ws, err := c.defaultWorkloads(t.Context())
			if err != nil {
				return err
			}
			if got := ws["app"].Status.SourceCommit; got != want {
				return fmt.Errorf("default/app's source commit %q, want %s", got, want)
			}
			return nil
		})
	})
	if t.Failed() {
		return
	}

	t.Run("kill -9 of the leader: another member leads and serves the API", func(t *testing.T) {
		// A join token rotated now: each new leader's DATA_DIR/join.token
		// must be it, though only the leader of now writes it.
		rotated := strings.TrimSpace(c.katcall(t, "token", "rotate"))
		var took []time.Duration
		for try := range failoverKills {
			old := c.leaderIndex(t)
			if err := c.agents[old].Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			var leader string
			polltest.UntilEvery(t, time.Minute, 50*time.Millisecond, "another member serves the API as the leader", func() bool {
				for i := range members {
					if i == old {
						continue
					}
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
					nodes, err := client(i).ListNodes(ctx)
					cancel()
					if err != nil {
						continue
					}
					for _, n := range nodes {
						if n.Leader && n.Name != c.Hosts[old].Name {
							leader = n.Name
							return true
						}
					}
				}
				return false
			})
			took = append(took, time.Since(killed))
			if err := c.agents[old].Wait(t.Context()); err == nil {
				t.Fatal("kat-agent exited cleanly after SIGKILL")
			}
			t.Logf("try %d: killed %s's kat-agent, %s led and served the API %s later", try+1, c.Hosts[old].Name, leader, took[try].Round(time.Millisecond))
			lh := c.Hosts[slices.IndexFunc(c.Hosts, func(h harness.Host) bool { return h.Name == leader })]
			if got := strings.TrimSpace(string(readHostFile(t, lh, "join.token"))); got != rotated {
				t.Errorf("the new leader %s's join.token is %.20q..., want the token rotated before the kills", leader, got)
			}

			// The old leader, restarted, rejoins as a follower; the
			// worker reports to the new leader all along.
			c.restartAsFollower(t, old, client(old), members)
		}
		// Every leader loop moved: the last leader schedules a new
		// workload (its instances are placed; no image is needed).
		c.apply(t, "after-failover", "Service", "\n  replicas: 2")
		polltest.UntilErr(t, time.Minute, "2 instances of a workload applied after the failovers placed", func() error {
			nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
			if err != nil {
				return err
			}
			placed := 0
			for _, n := range nodes {
				placed += n.Instances
			}
			if placed != 2 {
				return fmt.Errorf("%d instances placed", placed)
			}
			return nil
		})
		sorted := slices.Clone(took)
		slices.Sort(sorted)
		t.Logf("failover after kill -9 of the leader: p50 %s worst %s over %d tries %v (lease 2 s)",
			sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), len(took), took)
	})
	if t.Failed() {
		return
	}

	t.Run("after the failovers, webhooks to a member that does not lead reach the new leader's config-repo sync and app-repo resolution", func(t *testing.T) {
		follower := (c.leaderIndex(t) + 1) % members
		appHead := hooks.app.commitEmpty(t, "v2")
		if err := hooks.config.commitWorkload("hooked"); err != nil {
			t.Fatal(err)
		}
		// Both repositories are polled every hookPollSeconds, and the
		// leader's term began before these commits: only the webhooks
		// explain a sync now.
		sent := time.Now()
		for _, repo := range []*configRepo{hooks.config, hooks.app} {
			if code := postPush(t, web, c.Hosts[follower], "file://"+repo.bare, hooks.secret); code != http.StatusAccepted {
				t.Fatalf("signed webhook for %s to %s, which does not lead: %d, want 202", repo.bare, c.Hosts[follower].Name, code)
			}
		}
		if code := postPush(t, web, c.Hosts[follower], "file://"+hooks.config.bare, []byte("wrong secret")); code != http.StatusUnauthorized {
			t.Errorf("webhook signed with another secret to %s: %d, want 401", c.Hosts[follower].Name, code)
		}
		polltest.UntilErr(t, time.Minute, "the config repo's new workload synced and default/app resolved to the new commit", func() error {
			ws, err := c.defaultWorkloads(t.Context())
			if err != nil {
				return err
			}
			if _, ok := ws["hooked"]; !ok {
				return errors.New("default/hooked, committed to the config repo, is not there")
			}
			if got := ws["app"].Status.SourceCommit; got != appHead {
				return fmt.Errorf("default/app's source commit %q, want %s", got, appHead)
			}
			return nil
		})
		t.Logf("webhooks through %s: the config repo synced and the app repo resolved %s after they were sent", c.Hosts[follower].Name, time.Since(sent).Round(time.Millisecond))
	})
	if t.Failed() {
		return
	}

	t.Run("a stream of commits and applies through a kill -9 of the leader: nothing lost, nothing duplicated", func(t *testing.T) {
		old := c.streamThroughFailover(t)
		c.restartAsFollower(t, old, client(old), members)
	})
	if t.Failed() {
		return
	}

	t.Run("two of three members dead: writes stop with a clear error, nothing is lost when they return", func(t *testing.T) {
		label := func(cl *apiclient.Client, v string) error {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := cl.LabelNode(ctx, "node1", map[string]*string{"quorum": &v})
			return err
		}
		old := c.leaderIndex(t)
		survivor := (old + 1) % members
		other := (old + 2) % members
		if err := label(client(survivor), "before"); err != nil {
			t.Fatalf("label node1 through %s: %v", c.Hosts[survivor].Name, err)
		}
		for _, i := range []int{old, other} {
			if err := c.agents[i].Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = c.agents[i].Wait(t.Context())
		}
		var last error
		polltest.UntilErr(t, time.Minute, "a write through the survivor refused for the lost quorum", func() error {
			last = label(client(survivor), "during")
			if last != nil && strings.Contains(last.Error(), "etcd quorum lost") {
				return nil
			}
			return fmt.Errorf("write answered: %w", last)
		})
		t.Logf("a write through %s with two members dead: %v", c.Hosts[survivor].Name, last)

		for _, i := range []int{old, other} {
			a, err := c.StartAgent(t.Context(), i, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			c.agents[i] = a
		}
		polltest.UntilErr(t, 2*time.Minute, "three Ready members and a leader again", func() error {
			nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
			if err != nil {
				return err
			}
			ready, leaders := 0, 0
			for _, n := range nodes {
				if n.Status == "Ready" && n.EtcdMember {
					ready++
				}
				if n.Leader {
					leaders++
				}
			}
			if ready != members || leaders != 1 {
				return fmt.Errorf("nodes %+v", nodes)
			}
			return nil
		})
		n, err := client(c.leaderIndex(t)).GetNode(t.Context(), "node1")
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["quorum"] != "before" {
			t.Errorf("node1's label quorum after the members returned: %q, want the acknowledged write %q (and not the refused %q)", n.Labels["quorum"], "before", "during")
		}
		for i := range members {
			if err := label(client(i), "after-"+c.Hosts[i].Name); err != nil {
				t.Errorf("write through %s once the quorum is back: %v", c.Hosts[i].Name, err)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a worker that knew one member learns the others, and restarts while that member is down", func(t *testing.T) {
		c.workerLearnsMembers(t, client, members)
	})
	if t.Failed() {
		return
	}

	t.Run("deleting a member node removes it from the etcd quorum first", func(t *testing.T) {
		leader := c.leaderIndex(t)
		gone := (leader + 1) % members
		cli := leaderEtcd(t, c.Cluster, certTLS(t, c.Hosts[0], "etcd-root"))
		memberNames := func() []string {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			resp, err := cli.MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range resp.Members {
				names = append(names, m.Name)
			}
			slices.Sort(names)
			return names
		}
		if got := memberNames(); len(got) != members {
			t.Fatalf("etcd members before the deletion: %v", got)
		}
		// etcd refuses a change of members for a few seconds after the
		// last one came back: katcall's answer says so, and a retry passes.
		polltest.UntilErr(t, time.Minute, "katcall delete node "+c.Hosts[gone].Name, func() error {
			_, err := c.Katcall(t.Context(), c.bin.Katcall, "delete", "node", c.Hosts[gone].Name, "--force")
			return err
		})
		got := memberNames()
		if len(got) != members-1 || slices.Contains(got, c.Hosts[gone].Name) {
			t.Errorf("etcd members after deleting %s: %v", c.Hosts[gone].Name, got)
		}
		// Removed from the quorum, its etcd stops, and its kat-agent with it.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := c.agents[gone].Wait(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the kat-agent of the removed member %s still runs", c.Hosts[gone].Name)
		}
		if got := c.nodes(t); len(got) != members {
			t.Errorf("nodes after deleting %s: %+v", c.Hosts[gone].Name, got)
		}
	})
	if t.Failed() {
		return
	}

	// Last: it blocks the machine's address for a minute.
	t.Run("failed authentication through a member blocks the client, not the member", func(t *testing.T) {
		blockedThroughMember(t, c, web, token)
	})
}

// nodes lists the nodes as katcall get nodes -o json shows them.
// restartAsFollower starts host i's kat-agent again (killed, it was the
// leader) and waits until its own API answers (cl reaches only it,
// forwarding to the leader) and lists it as a member that does not lead,
// with a heartbeat sent since the restart, and every node Ready.
func (c *testCluster) restartAsFollower(t *testing.T, i int, cl *apiclient.Client, members int) {
	t.Helper()
	a, err := c.StartAgent(t.Context(), i, c.opts)
	if err != nil {
		t.Fatal(err)
	}
	c.agents[i] = a
	restarted := time.Now()
	polltest.UntilErr(t, 2*time.Minute, c.Hosts[i].Name+" back as a Ready follower", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		nodes, err := cl.ListNodes(ctx)
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range nodes {
			if n.Name == c.Hosts[i].Name && (n.Leader || !n.EtcdMember || n.LastHeartbeat == nil || n.LastHeartbeat.Before(restarted)) {
				return fmt.Errorf("%s: %+v", n.Name, n)
			}
			if n.Status == api.NodeReady {
				ready++
			}
		}
		if ready != members+1 {
			return fmt.Errorf("%d of %d nodes Ready", ready, members+1)
		}
		return nil
	})
}

func (c *testCluster) nodes(t *testing.T) []harness.Node {
	t.Helper()
	nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

// leaderIndex is the index of the host whose node leads.
func (c *testCluster) leaderIndex(t *testing.T) int {
	t.Helper()
	var idx int
	polltest.UntilErr(t, time.Minute, "one leader", func() error {
		nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Leader {
				for i, h := range c.Hosts {
					if h.Name == n.Name {
						idx = i
						return nil
					}
				}
			}
		}
		return fmt.Errorf("no leader among %+v", nodes)
	})
	return idx
}

// regexpLine reports whether a line of out starts with name and holds word.
func regexpLine(out, name, word string) bool {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == name && slices.Contains(f, word) {
			return true
		}
	}
	return false
}

// readHostFile reads a file of h's data directory.
func readHostFile(t *testing.T, h harness.Host, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.DataDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
