package multinode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/scripts/e2e"
)

// TestExecAndLogsAcrossNodes: the admin's katcall, configured for a member,
// reaches an instance on a worker through the leader: katcall exec runs a
// command there with its input piped, its output and error apart and its
// exit status; with -t from a real terminal the command has a terminal of
// katcall's size; and katcall logs -f of every instance goes on after the
// worker's agent restarts, from the line after the last one shown.
func TestExecAndLogsAcrossNodes(t *testing.T) {
	requirePrereqs(t)
	t.Parallel()
	c := startCluster(t, clusterSpec{name: "exec", hosts: 2})
	const worker = 1
	c.applyKat(t, "dbg", `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: dbg, namespace: default}
spec:
  type: Service
  replicas: 1
  source: {image: "localhost/kat-base:latest"}
  restartPolicy: {condition: Always}
  nodeSelector: {kat.harness/host: `+c.Hosts[worker].Name+`}
  container:
    command: ["/bin/sh", "-c", "i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done"]
    stopGracePeriodSeconds: 0
`)
	c.waitRunning(t, 2*time.Minute, "dbg", "running on the worker", equal(0, 1))
	// The container runs before its agent has reported it: exec, like
	// katcall status, goes by the report.
	var in api.Instance
	polltest.UntilErr(t, time.Minute, "dbg reported running on the worker", func() error {
		d, err := c.detail(t, "dbg")
		if err != nil {
			return err
		}
		if len(d.Instances) != 1 || d.Instances[0].Node != c.Hosts[worker].Name || d.Instances[0].Status.Phase != api.InstanceRunning {
			return fmt.Errorf("dbg's instances: %+v; want one running on %s", d.Instances, c.Hosts[worker].Name)
		}
		in = d.Instances[0]
		return nil
	})
	katcall := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(t.Context(), c.bin.Katcall, append([]string{"--config", c.KatcallConfig()}, args...)...)
		cmd.Env = append(os.Environ(), "KATCONFIG=", "HOME="+t.TempDir())
		return cmd
	}

	t.Run("exec -i", func(t *testing.T) {
		r := e2e.RunKatcallInput(t.Context(), c.bin.Katcall, strings.NewReader("ping from stdin\n"), "--config", c.KatcallConfig(),
			"exec", "default/dbg", "-i", "--", "sh", "-c", "cat; echo ran > /tmp/exec-marker; echo to-stderr >&2; exit 3")
		if r.Code != 3 || r.Stdout != "ping from stdin\n" || r.Stderr != "to-stderr\n" {
			t.Fatalf("katcall exec -i: %s; want exit 3, the input on stdout, the error on stderr", r)
		}
		// It ran in the instance's container on the worker.
		if out, err := podmanExec(t.Context(), c.Hosts[worker], in.Status.ContainerID, "cat", "/tmp/exec-marker"); err != nil || out != "ran\n" {
			t.Fatalf("the worker's container after exec: %q, %v", out, err)
		}
	})

	t.Run("exec -it from a terminal", func(t *testing.T) {
		cmd := katcall("exec", "default/dbg", "-i", "-t", "--", "sh", "-c", "tty; stty size; exit 5")
		term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
		if err != nil {
			t.Fatal(err)
		}
		defer term.Close()
		// Reading the terminal ends with EIO once katcall, its last user,
		// has exited.
		var out strings.Builder
		_, _ = io.Copy(&out, term)
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Fatalf("katcall exec -it: %v, want exit 5; it printed %q", err, out.String())
		}
		if !regexp.MustCompile(`/dev/pts/\d+\r?\n33 101\r?\n`).MatchString(out.String()) {
			t.Fatalf("katcall exec -it printed %q, want a terminal (tty) of 33 rows and 101 columns (stty size)", out.String())
		}
	})

	t.Run("logs -f goes on across an agent restart", func(t *testing.T) {
		lines, stop, err := e2e.StreamLines(katcall("logs", "default/dbg", "-f"))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		numbered := regexp.MustCompile(`^\[` + regexp.QuoteMeta(in.InstanceID) + `\] line (\d+)$`)
		var seen []string
		// next returns the next line, or fails after a minute.
		next := func() string {
			t.Helper()
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("katcall logs -f ended; it printed:\n%s", strings.Join(seen, "\n"))
				}
				seen = append(seen, l)
				return l
			case <-time.After(time.Minute):
				t.Fatalf("no line within a minute; katcall logs -f printed:\n%s", strings.Join(seen, "\n"))
				return ""
			}
		}
		number := func(l string) int {
			m := numbered.FindStringSubmatch(l)
			if m == nil {
				return -1
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		last := -1
		for last < 0 {
			last = number(next())
		}
		if err := c.agents[worker].Signal(syscall.SIGTERM); err != nil { // an upgrade: the containers stay
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := c.agents[worker].Wait(ctx); errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("the worker's kat-agent still runs a minute after SIGTERM")
		}
		stopped := time.Now()
		a, err := c.StartAgent(t.Context(), worker, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		c.agents[worker] = a
		// Every line once, in order, across the restart: none lost, none
		// repeated; and a line says the stream was interrupted.
		interrupted := false
		for {
			l := next()
			n := number(l)
			if n < 0 {
				if strings.Contains(l, "log stream interrupted") {
					interrupted = true
				}
				continue
			}
			if n != last+1 {
				t.Fatalf("line %d after line %d; katcall logs -f printed:\n%s", n, last, strings.Join(seen, "\n"))
			}
			last = n
			if interrupted {
				break // a line of the resumed stream
			}
		}
		t.Logf("the followed log went on %s after the worker's agent stopped", time.Since(stopped).Round(time.Millisecond))
	})
}
