package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// debugWorkload is a Service whose every run prints a line that names the
// run, then a second line, and sleeps.
func debugWorkload(name string, replicas int) map[string]string {
	return map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: %d
  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "echo run $(cat /proc/sys/kernel/random/uuid); echo second; exec sleep 600"]
`, name, replicas)}
}

// katcallStream runs katcall in the background and sends its output lines
// on the returned channel (closed when katcall exits); stop ends it.
func katcallStream(t *testing.T, c *Cluster, args ...string) (lines <-chan string, stop func()) {
	t.Helper()
	cmd := exec.Command(c.Bin.Katcall, append([]string{"--config", c.KatcallConfig()}, args...)...)
	cmd.Env = append(os.Environ(), "KATCONFIG=", "HOME="+os.TempDir())
	lines, stop, err := StreamLines(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return lines, stop
}

// waitLine waits for a line of lines that matches re and returns it.
func waitLine(t *testing.T, lines <-chan string, re *regexp.Regexp, what string) string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the stream ended; it had:\n%s", what, strings.Join(seen, "\n"))
			}
			if re.MatchString(l) {
				return l
			}
			seen = append(seen, l)
		case <-deadline.C:
			t.Fatalf("%s: not within 30s; the stream had:\n%s", what, strings.Join(seen, "\n"))
		}
	}
}

// TestExecLogsAndEvents proves the debugging tools with real Podman: katcall
// exec passes input and returns the command's exit status; katcall logs
// shows every instance with a prefix, takes --tail, --since, --timestamps
// and --previous (the run before a restart), and follows one instance
// across a restart; katcall get events --watch shows the API's apply as it
// happens and the filters select it.
func TestExecLogsAndEvents(t *testing.T) {
	requirePodman(t)
	c := StartTestCluster(t)
	name := "dbg-" + randomHex(3)
	ref := "default/" + name
	events, stopEvents := katcallStream(t, c, "get", "events", "--watch", "--kind", "workload", "-n", "default")

	mustApply(t, c, writeWorkload(t, debugWorkload(name, 2)))
	d := waitStatus(t, c, ref, "ready 2/2", func(d *api.WorkloadDetail) bool {
		return d.Status.Ready == 2 && len(d.Instances) == 2
	})
	waitLine(t, events, regexp.MustCompile(`workload/default/`+name+`\s+Created\s`), "the watched apply event")
	stopEvents()
	if r := c.Katcall(context.Background(), "get", "events", name, "--kind", "workload", "--type", "Normal", "-o", "json"); r.Code != 0 ||
		!strings.Contains(r.Stdout, `"reason": "Created"`) || !strings.Contains(r.Stdout, `"uid": "`) {
		t.Fatalf("katcall get events filtered: %s", r)
	}
	if r := c.Katcall(context.Background(), "get", "events", "--type", "Bad"); r.Code == 0 || !strings.Contains(r.Stderr, "type") {
		t.Fatalf("katcall get events --type Bad: %s, want an error naming type", r)
	}

	// exec: input in, output and exit status out; an instance by name.
	in := d.Instances[1].InstanceID
	if r := RunKatcallInput(context.Background(), c.Bin.Katcall, strings.NewReader("ping from stdin\n"), "--config", c.KatcallConfig(),
		"exec", ref, "--instance", in, "-i", "--", "sh", "-c", "cat; echo to-stderr >&2; exit 3"); r.Code != 3 || r.Stdout != "ping from stdin\n" || r.Stderr != "to-stderr\n" {
		t.Fatalf("katcall exec -i: %s; want exit 3 and the input echoed", r)
	}
	if r := c.Katcall(context.Background(), "exec", ref, "--instance", in, "--", "hostname"); r.Code != 0 || strings.TrimSpace(r.Stdout) == "" {
		t.Fatalf("katcall exec hostname: %s", r)
	}
	if r := c.Katcall(context.Background(), "get", "audit", "workload/default/"+name, "-o", "json"); r.Code != 0 ||
		!strings.Contains(r.Stdout, `"verb": "exec"`) || !strings.Contains(r.Stdout, in) || strings.Contains(r.Stdout, "ping from stdin") {
		t.Fatalf("katcall get audit after exec: %s", r)
	}

	// logs: every instance, prefixed; --tail; --since; --timestamps.
	r := c.Katcall(context.Background(), "logs", ref)
	for _, i := range d.Instances {
		if r.Code != 0 || !strings.Contains(r.Stdout, "["+i.InstanceID+"] run ") || !strings.Contains(r.Stdout, "["+i.InstanceID+"] second\n") {
			t.Fatalf("katcall logs of every instance lacks %s: %s", i.InstanceID, r)
		}
	}
	if r := c.Katcall(context.Background(), "logs", ref, "--tail", "1"); r.Code != 0 || strings.Contains(r.Stdout, " run ") || strings.Count(r.Stdout, "second") != 2 {
		t.Fatalf("katcall logs --tail 1: %s", r)
	}
	if r := c.Katcall(context.Background(), "logs", ref, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); r.Code != 0 || strings.Contains(r.Stdout, "second") {
		t.Fatalf("katcall logs --since an hour ahead: %s", r)
	}
	stamped := regexp.MustCompile(`(?m)^\[` + regexp.QuoteMeta(in) + `\] \d{4}-\d\d-\d\dT\S+ second$`)
	if r := c.Katcall(context.Background(), "logs", ref, "--timestamps"); r.Code != 0 || !stamped.MatchString(r.Stdout) {
		t.Fatalf("katcall logs --timestamps: %s", r)
	}
	if r := c.Katcall(context.Background(), "logs", ref, "--instance", in, "--previous"); r.Code == 0 || !strings.Contains(r.Stderr, "no previous run") {
		t.Fatalf("katcall logs --previous before a restart: %s", r)
	}

	// A restart: --previous shows the run before it, and a followed log
	// goes on with the new run.
	runLine := regexp.MustCompile(`run [0-9a-f-]{36}`)
	firstRun := runLine.FindString(c.Katcall(context.Background(), "logs", ref, "--instance", in).Stdout)
	if firstRun == "" {
		t.Fatal("no run line in the instance's log")
	}
	followed, stopFollow := katcallStream(t, c, "logs", ref, "--instance", in, "-f")
	waitLine(t, followed, regexp.MustCompile(`^`+firstRun+`$`), "the followed log's first run")
	waitLine(t, followed, regexp.MustCompile(`^second$`), "the followed log's first run")
	podman(t, "kill", d.Instances[1].Status.ContainerID)
	waitStatus(t, c, ref, "a restart after podman kill", func(d *api.WorkloadDetail) bool {
		for _, i := range d.Instances {
			if i.InstanceID == in {
				return i.Status.Restarts == 1 && i.Status.State == "running"
			}
		}
		return false
	})
	secondRun := waitLine(t, followed, runLine, "the next run in the followed log")
	if secondRun == firstRun {
		t.Fatalf("the followed log repeated the first run's line %q", firstRun)
	}
	stopFollow()
	prev := c.Katcall(context.Background(), "logs", ref, "--instance", in, "--previous")
	if prev.Code != 0 || prev.Stdout != firstRun+"\nsecond\n" {
		t.Fatalf("katcall logs --previous = %s, want the first run only (%s)", prev, firstRun)
	}
}
