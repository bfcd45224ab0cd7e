package multinode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/e2e"
	"kat.dws.rip/kat/scripts/harness"
)

// ingressStream is a constant request stream from a client host through
// one ingress node: GET / of one host, each request on a connection of its
// own, never retried.
type ingressStream struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}

	mu                 sync.Mutex
	requests, failures int
	samples            []string    // the first failures, for the log
	failedAt           []time.Time // when each failure was seen
}

// startIngressStream sends a request for host through addr from client
// every 20 ms until stop. A failure is an error, or an answer other than
// 200 or whose body ok refuses.
func startIngressStream(t *testing.T, client harness.Host, addr netip.Addr, name, host string, ok func(body string) bool) *ingressStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	s := &ingressStream{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			code, body, err := ingressGet(client, addr, host, "/")
			if ctx.Err() != nil {
				return // cut by stop, not by the proxy
			}
			s.mu.Lock()
			s.requests++
			if err != nil || code != 200 || !ok(body) {
				s.failures++
				s.failedAt = append(s.failedAt, time.Now())
				sample := fmt.Sprintf("%s: %d %q %v", time.Now().Format("15:04:05.000"), code, body, err)
				switch { // the first five, and the last as the sixth
				case len(s.samples) < 5:
					s.samples = append(s.samples, sample)
				case len(s.samples) == 5:
					s.samples = append(s.samples, "last "+sample)
				default:
					s.samples[5] = "last " + sample
				}
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// failureWindow is the first and last failure of a stopped stream; ok is
// false without any.
func (s *ingressStream) failureWindow() (first, last time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failedAt) == 0 {
		return first, last, false
	}
	return s.failedAt[0], s.failedAt[len(s.failedAt)-1], true
}

// count is how many requests the stream sent so far.
func (s *ingressStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// stop ends the stream and returns its counts.
func (s *ingressStream) stop() (requests, failures int, samples []string) {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests, s.failures, s.samples
}

// TestIngressKeepsServing proves what happens to requests through the
// ingress while things change: a rolling update of a backend under a
// constant stream through both ingress nodes fails no request; an update
// of the proxy goes node by node, stop-first, never two proxies on a node
// and never both nodes failing at once; killing
// one ingress node's proxy container leaves the other serving without a
// failure, and the killed one is refilled and serves again; taking an
// ingress node down (its kat-agent and its link) leaves the other serving.
func TestIngressKeepsServing(t *testing.T) {
	t.Parallel()
	requirePrereqs(t)
	c := startCluster(t, clusterSpec{name: "iks", hosts: 4, start: 3, ingress: []int{1, 2}})
	node1, client := c.Hosts[0], c.Hosts[3]
	ingress := []harness.Host{c.Hosts[1], c.Hosts[2]}

	// web answers "VERSION-HOSTNAME" on a.test, 2 replicas on node1.
	applyWeb := func(t *testing.T, version string) {
		t.Helper()
		cmd := fmt.Sprintf("mkdir -p /www && echo %s-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www", version)
		c.applyFiles(t, "web", map[string]string{
			"workload.kat":            webWorkload("web", 2, node1.Name, cmd),
			"VirtualLoadBalancer.kat": webVLB + "  ingress:\n    - {host: a.test, path: \"/\", servicePortName: http}\n",
		})
	}
	c.katcall(t, "apply", "-f", filepath.Join(e2e.RepoRoot(), "examples-repo", "kat-core"))
	applyWeb(t, "v1")
	c.waitRunning(t, 2*time.Minute, "ingress", "the proxy on the two ingress nodes only", equal(0, 1, 1, 0))
	serves := func(t *testing.T, in harness.Host, within time.Duration, prefix string) {
		t.Helper()
		polltest.UntilErr(t, within, fmt.Sprintf("a.test through %s answers %s...", in.Name, prefix), func() error {
			code, body, err := ingressGet(client, in.Addr, "a.test", "/")
			if err == nil && (code != 200 || !strings.HasPrefix(body, prefix)) {
				err = fmt.Errorf("got %d %q", code, body)
			}
			return err
		})
	}
	for _, in := range ingress {
		serves(t, in, time.Minute, "v1-")
	}
	web := func(prefixes ...string) func(string) bool {
		return func(body string) bool {
			for _, p := range prefixes {
				if strings.HasPrefix(body, p) {
					return true
				}
			}
			return false
		}
	}

	t.Run("a rolling update under a request stream fails no request", func(t *testing.T) {
		var streams []*ingressStream
		for _, in := range ingress {
			streams = append(streams, startIngressStream(t, client, in.Addr, "through "+in.Name, "a.test", web("v1-", "v2-")))
		}
		started := time.Now()
		applyWeb(t, "v2")
		// Done when both nodes answer only v2 and the old instances are gone.
		for _, in := range ingress {
			serves(t, in, 2*time.Minute, "v2-")
		}
		c.waitRunning(t, time.Minute, "web", "2 running on node1", equal(2, 0, 0, 0))
		polltest.UntilErr(t, 30*time.Second, "8 answers in a row from v2 through node2", func() error {
			for range 8 {
				_, body, err := ingressGet(client, ingress[0].Addr, "a.test", "/")
				if err != nil {
					return fmt.Errorf("ask through node2: %w", err)
				}
				if !strings.HasPrefix(body, "v2-") {
					return fmt.Errorf("answer %q", body)
				}
			}
			return nil
		})
		took := time.Since(started)
		for _, s := range streams {
			n, failed, samples := s.stop()
			t.Logf("rolling update (%s): %d requests %s, %d failed %v", s.name, n, took.Round(time.Millisecond), failed, samples)
			if n == 0 || failed > 0 {
				t.Errorf("%s: %d of %d requests failed during the rolling update, want none of some: %v", s.name, failed, n, samples)
			}
		}
	})

	t.Run("a proxy update goes node by node, stop-first, the other node serving", func(t *testing.T) {
		// The web update before this one ends when v2 answers; its old
		// instances leave after that. Their removal is not this update's.
		polltest.UntilErr(t, time.Minute, "the web update's old instances removed", func() error {
			ids, err := c.Hosts[0].Containers(t.Context(), "label=kat.workload=web")
			if err != nil {
				return err
			}
			if len(ids) != 2 {
				return fmt.Errorf("%d web containers on %s, want the 2 of v2", len(ids), c.Hosts[0].Name)
			}
			return nil
		})
		proxies := func() (map[string]string, error) {
			out := map[string]string{}
			for _, in := range ingress {
				ids, err := in.Containers(t.Context(), "label=kat.workload=ingress", "status=running")
				if err != nil {
					return nil, err
				}
				if len(ids) > 1 {
					t.Errorf("%d proxies run on %s at once: %v", len(ids), in.Name, ids)
				}
				if len(ids) == 1 {
					out[in.Name] = ids[0]
				}
			}
			return out, nil
		}
		before, err := proxies()
		if err != nil || len(before) != 2 {
			t.Fatalf("proxies before the update: %v, %v", before, err)
		}
		var streams []*ingressStream
		for _, in := range ingress {
			streams = append(streams, startIngressStream(t, client, in.Addr, "through "+in.Name, "a.test", web("v2-")))
		}
		// The recipe with one more environment variable: a new template.
		dir := filepath.Join(t.TempDir(), "ingress")
		src := filepath.Join(e2e.RepoRoot(), "examples-repo", "kat-core", "ingress")
		for _, f := range []string{"workload.kat", "VirtualLoadBalancer.kat"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				t.Fatal(err)
			}
			if f == "workload.kat" {
				b = []byte(strings.Replace(string(b), "    name: haproxy\n", "    name: haproxy\n    env: [{name: KAT_TEST_REVISION, value: \"2\"}]\n", 1))
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		started := time.Now()
		c.katcall(t, "apply", "-f", dir)
		polltest.UntilErr(t, 2*time.Minute, "a new proxy on both ingress nodes, serving", func() error {
			now, err := proxies()
			if err != nil {
				return err
			}
			for _, in := range ingress {
				if now[in.Name] == "" || now[in.Name] == before[in.Name] {
					return fmt.Errorf("proxies %v (before %v)", now, before)
				}
				code, body, err := ingressGet(client, in.Addr, "a.test", "/")
				if err != nil {
					return fmt.Errorf("ask through %s: %w", in.Name, err)
				}
				if code != 200 || !strings.HasPrefix(body, "v2-") {
					return fmt.Errorf("%s answers %d %q", in.Name, code, body)
				}
			}
			return nil
		})
		took := time.Since(started)
		var windows [][2]time.Time
		for _, s := range streams {
			n, failed, samples := s.stop()
			first, last, any := s.failureWindow()
			t.Logf("proxy update (%s): %d requests in %s, %d failed (from %s to %s) %v", s.name, n, took.Round(time.Millisecond),
				failed, first.Format("15:04:05.000"), last.Format("15:04:05.000"), samples)
			if any {
				windows = append(windows, [2]time.Time{first, last})
			}
		}
		if len(windows) == 2 && windows[0][0].Before(windows[1][1]) && windows[1][0].Before(windows[0][1]) {
			t.Errorf("both ingress nodes failed requests at once during the update: %v", windows)
		}
	})

	t.Run("a killed proxy leaves the other serving and comes back", func(t *testing.T) {
		other := startIngressStream(t, client, ingress[1].Addr, "through "+ingress[1].Name, "a.test", web("v2-"))
		victim := ingress[0]
		ids, err := victim.Containers(t.Context(), "label=kat.workload=ingress", "status=running")
		if err != nil || len(ids) != 1 {
			t.Fatalf("the proxy container on %s: %v, %v", victim.Name, ids, err)
		}
		startedAt := func() (string, error) {
			out, err := victim.Command(t.Context(), "podman", append(victim.PodmanArgs(), "inspect", "--format", "{{.State.Running}} {{.State.StartedAt}}", ids[0])...).Output()
			return strings.TrimSpace(string(out)), err
		}
		before, err := startedAt()
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if out, err := victim.Command(t.Context(), "podman", append(victim.PodmanArgs(), "kill", ids[0])...).CombinedOutput(); err != nil {
			t.Fatalf("podman kill the proxy on %s: %v: %s", victim.Name, err, out)
		}
		polltest.UntilErr(t, time.Minute, "the proxy container on "+victim.Name+" restarted", func() error {
			now, err := startedAt()
			if err == nil && (now == before || !strings.HasPrefix(now, "true ")) {
				err = fmt.Errorf("state %q (before the kill %q)", now, before)
			}
			return err
		})
		serves(t, victim, time.Minute, "v2-")
		back := time.Since(killed)
		n, failed, samples := other.stop()
		t.Logf("proxy on %s killed -> serves again %s later; through %s meanwhile: %d requests, %d failed %v",
			victim.Name, back.Round(time.Millisecond), ingress[1].Name, n, failed, samples)
		if n == 0 || failed > 0 {
			t.Errorf("through %s: %d of %d requests failed while %s's proxy was killed, want none of some: %v", ingress[1].Name, failed, n, ingress[1].Name, samples)
		}
	})

	t.Run("an ingress node down leaves the other serving", func(t *testing.T) {
		down, up := ingress[1], ingress[0]
		survivor := startIngressStream(t, client, up.Addr, "through "+up.Name, "a.test", web("v2-"))
		if err := c.agents[2].Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := c.agents[2].Wait(t.Context()); err == nil {
			t.Fatal("kat-agent exited cleanly after SIGKILL")
		}
		link := func(state string) error {
			out, err := exec.CommandContext(context.WithoutCancel(t.Context()), "ip", "link", "set", down.VethHost, state).CombinedOutput()
			if err != nil {
				return fmt.Errorf("ip link set %s %s: %w: %s", down.VethHost, state, err, out)
			}
			return nil
		}
		if err := link("down"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := link("up"); err != nil {
				t.Error(err)
			}
		})
		cut := time.Now()
		polltest.UntilErr(t, 30*time.Second, down.Name+" unreachable and seen NotReady", func() error {
			if _, _, err := ingressGet(client, down.Addr, "a.test", "/"); err == nil {
				return fmt.Errorf("%s still answers", down.Name)
			}
			nodes, err := c.Nodes(t.Context(), c.bin.Katcall)
			if err != nil {
				return err
			}
			for _, n := range nodes {
				if n.Name == down.Name && n.Status == "Ready" {
					return fmt.Errorf("nodes %v", nodes)
				}
			}
			return nil
		})
		notReady := time.Since(cut)
		// The leader's reaction to the loss (status, routes) is under way:
		// keep streaming a while longer.
		more := survivor.count() + 50
		polltest.Until(t, 30*time.Second, "50 more requests through "+up.Name, func() bool { return survivor.count() >= more })
		serves(t, up, 10*time.Second, "v2-")
		n, failed, samples := survivor.stop()
		t.Logf("%s down (agent killed, link down) -> NotReady %s later; through %s meanwhile: %d requests, %d failed %v",
			down.Name, notReady.Round(time.Millisecond), up.Name, n, failed, samples)
		if n == 0 || failed > 0 {
			t.Errorf("through %s: %d of %d requests failed while %s was down, want none of some: %v", up.Name, failed, n, down.Name, samples)
		}
	})
}
