package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// BenchmarkAgentStart50 times a Service of 50 replicas from outside, on a
// node with cluster.kat's defaults that has run containers before: from
// `katcall apply` until the API shows all 50 instances running (what
// `katcall status` shows), against its floor, 50 sequential `podman run -d`
// of the same image with the same uid map. The two take turns, which goes
// first alternating, on the same node, whose agent runs throughout; the
// status is looked at the same way during both (statusPollEvery50). It
// prints each iteration's figures and ratio, then their minimum, median and
// maximum, the agent's RSS with 50 containers, its own CPU per start and
// what one look at the status of 50 instances costs it.
func BenchmarkAgentStart50(b *testing.B) {
	requirePodman(b)
	const n = 50
	c, err := NewCluster(sharedBinaries(b), b.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "defaults-cluster.kat"))
	if err != nil {
		b.Fatal(err)
	}
	c.ExtraArgs = append(c.ExtraArgs, benchAgentArgs()...)
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if c.Running() {
			_ = c.Stop(30 * time.Second)
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			b.Errorf("clean up: %v", err)
		}
	})
	waitNodeNetwork(b, c.Node)
	client := clientFor(b, c)

	// The node runs containers before: one instance through KAT, one
	// by hand, both gone again.
	warm := "bench-warm-" + randomHex(3)
	_, idmap := kat50(b, c, client, warm, 1, nil)
	floor50(b, nil, idmap, 1, "")

	s := sideBySide{what: "50 instances", kat: "katcall apply to 50 running", floor: "50 sequential podman run -d"}
	var cpu, rss, look []float64
	i := 0
	for b.Loop() {
		i++
		name := fmt.Sprintf("bench-%s-%d", randomHex(2), i)
		var kat, floor time.Duration
		var slow func()
		katArm := func() {
			cpu0, err := cpuTicks(c.PID())
			if err != nil {
				b.Fatal(err)
			}
			var r int64
			logFrom := fileSize(c.LogPath())
			tl := &startTimeline{}
			kat, _ = kat50(b, c, client, name, n, tl, func() {
				cpu1, _ := cpuTicks(c.PID())
				cpu = append(cpu, ticksToMs(cpu1-cpu0)/n)
				r, _ = RSS(c.PID())
				rss = append(rss, float64(r)/(1<<20))
				look = append(look, statusLookCPU(b, c, client, "default/"+name))
			})
			fmt.Fprintf(os.Stderr, "50 instances, run %d: %s\n", i, tl.summary())
			slow = func() { keepSlowRun(b, c, i, tl, logFrom) }
		}
		floorArm := func() { floor = floor50(b, client, idmap, n, "default/"+name) }
		if i%2 == 1 {
			katArm()
			floorArm()
		} else {
			floorArm()
			katArm()
		}
		s.add(kat, floor)
		if kat > floor { // above the floor: keep what happened
			slow()
		}
	}
	s.report(b, "start50")
	if len(cpu) > 0 {
		cm, rm := minMedMax(cpu), minMedMax(rss)
		b.ReportMetric(rm[1], "agent-rss-MiB")
		b.ReportMetric(cm[1], "agent-cpu-ms/instance")
		lm := minMedMax(look)
		b.ReportMetric(lm[1], "agent-cpu-ms/status-look")
		fmt.Fprintf(os.Stderr, "kat-agent with 50 containers: RSS median %.1f MiB (max %.1f); its own CPU per instance started (podman's not counted, the looks at the status counted) median %.1f ms (max %.1f); "+
			"one look at the status of 50 instances median %.2f ms of its CPU (max %.2f), every %s while KAT is timed\n",
			rm[1], rm[2], cm[1], cm[2], lm[1], lm[2], statusPollEvery50)
	}
}

// benchAgentArgs are extra kat-agent arguments from $KAT_BENCH_AGENT_ARGS
// (space-separated), to look inside a benchmark's agent (a podman wrapper
// that counts its processes, say); the figures are a user's only without
// them.
func benchAgentArgs() []string { return strings.Fields(os.Getenv("KAT_BENCH_AGENT_ARGS")) }

// kat50 applies a sleeper Service of n replicas with katcall, waits until
// the API shows all n running (recording each look in tl unless it is nil),
// calls each of then (before anything else runs), deletes it and waits
// until its containers are gone. It returns the time from apply to all
// running, and the uid map the agent gave the workload (podman's --uidmap
// form).
func kat50(b *testing.B, c *Cluster, client *apiclient.Client, name string, n int, tl *startTimeline, then ...func()) (time.Duration, string) {
	b.Helper()
	dir := writeWorkload(b, sleeper(name, n))
	ref := "default/" + name
	start := time.Now()
	if tl != nil {
		tl.start = start
	}
	mustApplyTB(b, c, dir)
	at, _ := untilStatus(b, client, ref, statusPollEvery50, 5*time.Minute, func(d *api.WorkloadDetail) bool {
		if tl != nil {
			tl.look(d)
		}
		running := 0
		for _, in := range d.Instances {
			if in.Status.State == "running" {
				running++
			}
		}
		return running == n
	})
	took := at.Sub(start)
	for _, f := range then {
		f()
	}
	idmap := workloadIDMap(b, c.Node, name)
	if _, err := client.DeleteWorkload(context.Background(), "default", name, false); err != nil {
		b.Fatalf("delete %s: %v", ref, err)
	}
	polltest.UntilErr(b, 5*time.Minute, ref+"'s containers gone", func() error {
		out, err := exec.Command("podman", "ps", "-aq", "--filter", "label=kat.node="+c.Node, "--filter", "label=kat.workload="+name).Output()
		if err != nil {
			return fmt.Errorf("podman ps: %w", err)
		}
		if left := len(strings.Fields(string(out))); left > 0 {
			return fmt.Errorf("%d left", left)
		}
		return nil
	})
	return took, idmap
}

// floor50 runs n sequential `podman run -d` of the sleeper with uid and
// gid map idmap, while the status of ref (unless client is nil) is looked at as a
// benchmark looks at KAT's, and returns how long they took. It removes
// them afterwards.
func floor50(b *testing.B, client *apiclient.Client, idmap string, n int, ref string) time.Duration {
	b.Helper()
	label := "kat-bench=" + randomHex(4)
	b.Cleanup(func() { removeLabelled(b, label) })
	stop := func() {}
	if client != nil {
		stop = pollStatus(client, ref, statusPollEvery50)
	}
	start := time.Now()
	for i := range n {
		out, err := exec.Command("podman", "run", "-d", "--uidmap", idmap, "--gidmap", idmap, "--label", label,
			"--name", fmt.Sprintf("katbench-%s-%d", strings.TrimPrefix(label, "kat-bench="), i),
			"localhost/kat-base:latest", "/bin/sleep", "100000").CombinedOutput()
		if err != nil {
			stop()
			b.Fatalf("podman run: %v\n%s", err, out)
		}
	}
	took := time.Since(start)
	stop()
	removeLabelled(b, label)
	return took
}

// workloadIDMap returns the uid map (podman's --uidmap form) of a running
// container of workload name on node.
func workloadIDMap(b *testing.B, node, name string) string {
	b.Helper()
	out, err := exec.Command("podman", "ps", "-q", "--no-trunc", "--filter", "label=kat.node="+node, "--filter", "label=kat.workload="+name).Output()
	ids := strings.Fields(string(out))
	if err != nil || len(ids) == 0 {
		b.Fatalf("podman ps: %v (%d containers of %s)", err, len(ids), name)
	}
	out, err = exec.Command("podman", "inspect", "--format", "{{json .HostConfig.IDMappings}}", ids[0]).Output()
	if err != nil {
		b.Fatalf("podman inspect %s: %v", ids[0], err)
	}
	var m struct{ UidMap, GidMap []string }
	if err := json.Unmarshal(out, &m); err != nil || len(m.UidMap) != 1 || len(m.GidMap) != 1 || m.UidMap[0] != m.GidMap[0] {
		b.Fatalf("podman inspect %s: IDMappings %s (%v): want one uid map, the gid map's", ids[0], out, err)
	}
	return m.UidMap[0]
}

// waitNodeNetwork waits (a minute at most) until node's agent has made its
// Podman network.
func waitNodeNetwork(tb testing.TB, node string) {
	tb.Helper()
	polltest.UntilEvery(tb, time.Minute, 50*time.Millisecond, "the network of "+node, func() bool {
		return exec.Command("podman", "network", "exists", NetworkName(node)).Run() == nil
	})
}

func mustApplyTB(tb testing.TB, c *Cluster, path string) {
	tb.Helper()
	if r := c.Katcall(context.Background(), "apply", "-f", path); r.Code != 0 {
		tb.Fatalf("katcall apply -f %s: %s", path, r)
	}
}

func removeLabelled(tb testing.TB, label string) {
	tb.Helper()
	if err := removeByFilter(nil, "label="+label); err != nil {
		tb.Error(err)
	}
}

// statusLookCPU returns the agent's CPU time, in milliseconds, per look at
// ref's status, once the agent is idle: the cost of watching a benchmark
// from outside.
func statusLookCPU(b *testing.B, c *Cluster, client *apiclient.Client, ref string) float64 {
	b.Helper()
	const looks = 100
	ns, name, _ := strings.Cut(ref, "/")
	waitIdle(b, c.PID())
	cpu0, err := cpuTicks(c.PID())
	if err != nil {
		b.Fatal(err)
	}
	for range looks {
		if _, err := client.WorkloadStatus(context.Background(), ns, name); err != nil {
			b.Fatalf("status of %s: %v", ref, err)
		}
	}
	cpu1, err := cpuTicks(c.PID())
	if err != nil {
		b.Fatal(err)
	}
	return ticksToMs(cpu1-cpu0) / looks
}

// startTimeline is a timed start of instances as the looks at its status
// saw it: each change in how many instances were placed, had a container
// and ran, and the messages they carried, from the apply on.
type startTimeline struct {
	start time.Time
	lines []string
	last  string
	// firstRunning is when a look first saw an instance running.
	firstRunning time.Duration
}

// look records one look at the status.
func (t *startTimeline) look(d *api.WorkloadDetail) {
	withContainer, running := 0, 0
	messages := map[string]int{}
	for _, in := range d.Instances {
		if in.Status.ContainerID != "" {
			withContainer++
		}
		if in.Status.State == "running" {
			running++
		}
		if in.Status.Message != "" {
			messages[in.Status.Message]++
		}
	}
	since := time.Since(t.start)
	if running > 0 && t.firstRunning == 0 {
		t.firstRunning = since
	}
	line := fmt.Sprintf("placed %d, with a container %d, running %d", len(d.Instances), withContainer, running)
	if len(messages) > 0 {
		line += fmt.Sprintf("; messages (count): %v", messages)
	}
	if line != t.last {
		t.lines = append(t.lines, fmt.Sprintf("+%d ms: %s", since.Milliseconds(), line))
		t.last = line
	}
}

// summary says when the looks first saw an instance running and what the
// last look saw.
func (t *startTimeline) summary() string {
	if len(t.lines) == 0 {
		return "no look at the status"
	}
	return fmt.Sprintf("first instance seen running +%d ms after the apply; last look %s", t.firstRunning.Milliseconds(), t.lines[len(t.lines)-1])
}

// keepSlowRun keeps the timeline of run i and the agent's log from offset
// logFrom on (what it wrote during the run) in $KAT_BENCH_KEEP_DIR, else
// in a directory of its own under the system's temporary one, and says where:
// the cluster's own directory goes with the benchmark.
func keepSlowRun(b *testing.B, c *Cluster, i int, tl *startTimeline, logFrom int64) {
	b.Helper()
	dir := os.Getenv("KAT_BENCH_KEEP_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kat-bench-agent-"+c.Node+"-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Errorf("keep run %d: %v", i, err)
		return
	}
	log, err := os.ReadFile(c.LogPath())
	if err != nil {
		b.Errorf("keep run %d: %v", i, err)
		return
	}
	timeline := strings.Join(append(tl.lines, tl.summary()), "\n") + "\n"
	err = errors.Join(os.WriteFile(filepath.Join(dir, fmt.Sprintf("run%d-timeline.txt", i)), []byte(timeline), 0o644),
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("run%d-agent.log", i)), log[min(logFrom, int64(len(log))):], 0o644))
	if err != nil {
		b.Errorf("keep run %d: %v", i, err)
		return
	}
	fmt.Fprintf(os.Stderr, "50 instances, run %d was slower than its floor: its timeline and the agent's log are in %s\n", i, dir)
}

// fileSize is the size of the file at path, 0 when it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
