package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll"
)

// jobWorkload is a Job of namespace default running command under restart
// policy Never, with the given job.kat spec lines.
func jobWorkload(name, command, spec string) map[string]string {
	return map[string]string{
		"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Job
  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Never
  container:
    command: ["/bin/sh", "-c", %q]
    stopGracePeriodSeconds: 1
`, name, command),
		"job.kat": "apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec:\n" + spec,
	}
}

// jobRuns runs katcall get jobs NAME -o json.
func jobRuns(t testing.TB, c *Cluster, name string) ([]api.JobRun, error) {
	t.Helper()
	r := c.Katcall(context.Background(), "get", "jobs", name, "-o", "json")
	if r.Code != 0 {
		if strings.Contains(r.Stderr, "no runs of job") {
			return nil, nil
		}
		return nil, fmt.Errorf("katcall get jobs %s: %s", name, r)
	}
	var runs []api.JobRun
	if err := json.Unmarshal([]byte(r.Stdout), &runs); err != nil {
		return nil, fmt.Errorf("decode katcall get jobs: %w\n%s", err, r.Stdout)
	}
	return runs, nil
}

// waitRuns polls the Job's runs until cond holds, for at most timeout.
func waitRuns(t testing.TB, c *Cluster, name, what string, timeout time.Duration, cond func([]api.JobRun) bool) []api.JobRun {
	t.Helper()
	return waitFor(t, c, "job "+name, what, time.Now().Add(timeout), func() ([]api.JobRun, error) { return jobRuns(t, c, name) }, cond)
}

// containerRun is one container of a Job as Podman recorded it.
type containerRun struct {
	exitCode          int
	started, finished time.Time
}

// jobContainers inspects every container of workload on the cluster's node.
func jobContainers(t testing.TB, c *Cluster, workload string) []containerRun {
	t.Helper()
	ids := containerIDs(t, c.Node, workload)
	if len(ids) == 0 {
		return nil
	}
	out := podman(t, append([]string{"inspect", "--format", "{{.State.ExitCode}} {{.State.StartedAt.Format \"2006-01-02T15:04:05.999999999Z07:00\"}} {{.State.FinishedAt.Format \"2006-01-02T15:04:05.999999999Z07:00\"}}"}, ids...)...)
	var runs []containerRun
	for _, line := range strings.Split(out, "\n") {
		var r containerRun
		var s, f string
		if _, err := fmt.Sscan(line, &r.exitCode, &s, &f); err != nil {
			t.Fatalf("podman inspect line %q: %v", line, err)
		}
		var err error
		if r.started, err = time.Parse(time.RFC3339Nano, s); err != nil {
			t.Fatalf("started %q: %v", s, err)
		}
		if r.finished, err = time.Parse(time.RFC3339Nano, f); err != nil {
			t.Fatalf("finished %q: %v", f, err)
		}
		runs = append(runs, r)
	}
	return runs
}

// maxOverlap is the most containers that ran at the same moment, by
// Podman's start and finish times.
func maxOverlap(runs []containerRun) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range runs {
		edges = append(edges, edge{r.started, 1}, edge{r.finished, -1})
	}
	// Ends before starts at the same instant.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur, most := 0, 0
	for _, e := range edges {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// TestJobs runs Jobs on one node with real Podman, side by side: completions
// and parallelism (exactly 5 successful containers, never more than 2 at
// once by Podman's own start and finish times), backoffLimit (exactly
// 1 + backoffLimit failed containers, then Failed), activeDeadlineSeconds
// (the container stopped and removed, the run DeadlineExceeded), a cron
// schedule (consecutive runs a minute apart, the measured gaps logged), the
// workload status of each, and katcall get jobs -o json's fields.
func TestJobs(t *testing.T) {
	requirePodman(t)
	t.Parallel()
	c := StartTestCluster(t)
	suffix := randomHex(3)
	batch, failing, slow, cron := "batch-"+suffix, "failing-"+suffix, "slow-"+suffix, "cron-"+suffix
	// Every 10 seconds, not every minute: two runs a schedule apart take 20
	// seconds of the suite instead of 70 (the leader's unit tests cover
	// five-field schedules).
	mustApply(t, c, writeWorkload(t, jobWorkload(cron, "echo tick", "  schedule: \"@every 10s\"\n")))
	mustApply(t, c, writeWorkload(t, jobWorkload(batch, "echo working; sleep 2", "  completions: 5\n  parallelism: 2\n")))
	mustApply(t, c, writeWorkload(t, jobWorkload(failing, "echo failing; exit 3", "  backoffLimit: 2\n")))
	mustApply(t, c, writeWorkload(t, jobWorkload(slow, "sleep 600", "  activeDeadlineSeconds: 10\n")))

	t.Run("completions and parallelism", func(t *testing.T) {
		t.Parallel()
		runs := waitRuns(t, c, batch, "the run to succeed", 3*time.Minute, func(rs []api.JobRun) bool {
			return len(rs) == 1 && rs[0].State == api.RunSucceeded
		})
		r := runs[0]
		if r.Succeeded != 5 || r.Failed != 0 || r.Active != 0 || len(r.Instances) != 5 || r.Reason != api.RunReasonCompleted {
			t.Fatalf("run %+v: want 5 succeeded instances", r)
		}
		cs := jobContainers(t, c, batch)
		if len(cs) != 5 {
			t.Fatalf("%d containers in Podman, want exactly 5", len(cs))
		}
		for _, cr := range cs {
			if cr.exitCode != 0 {
				t.Errorf("a container exited %d", cr.exitCode)
			}
		}
		most := maxOverlap(cs)
		t.Logf("5 completions by 2: at most %d containers at once; run took %s", most, r.CompletionTime.Sub(r.StartTime).Round(time.Millisecond))
		if most > 2 {
			t.Errorf("%d containers ran at once, parallelism 2", most)
		}
		d := waitStatus(t, c, "default/"+batch, "Succeeded 5/5", func(d *api.WorkloadDetail) bool {
			return d.Status.Phase == api.PhaseSucceeded && d.Status.Ready == 5 && d.Status.Desired == 5
		})
		if d.Status.LastRun != r.Run {
			t.Errorf("status lastRun %q, want %q", d.Status.LastRun, r.Run)
		}
	})

	t.Run("backoffLimit", func(t *testing.T) {
		t.Parallel()
		runs := waitRuns(t, c, failing, "the run to fail", 3*time.Minute, func(rs []api.JobRun) bool {
			return len(rs) == 1 && rs[0].State == api.RunFailed
		})
		r := runs[0]
		if r.Reason != api.RunReasonBackoffLimitExceeded || r.Failed != 3 || r.Succeeded != 0 || len(r.Instances) != 3 {
			t.Fatalf("run %+v: want BackoffLimitExceeded after 3 failed instances", r)
		}
		cs := jobContainers(t, c, failing)
		if len(cs) != 3 {
			t.Fatalf("%d containers in Podman, want 1 + backoffLimit = 3", len(cs))
		}
		for _, cr := range cs {
			if cr.exitCode != 3 {
				t.Errorf("a container exited %d, want 3", cr.exitCode)
			}
		}
		waitStatus(t, c, "default/"+failing, "Failed", func(d *api.WorkloadDetail) bool {
			return d.Status.Phase == api.PhaseFailed && strings.Contains(d.Status.LastError, "backoffLimit")
		})
	})

	t.Run("activeDeadlineSeconds", func(t *testing.T) {
		t.Parallel()
		runs := waitRuns(t, c, slow, "the run to fail at its deadline", 3*time.Minute, func(rs []api.JobRun) bool {
			return len(rs) == 1 && rs[0].State == api.RunFailed
		})
		r := runs[0]
		if r.Reason != api.RunReasonDeadlineExceeded || len(r.Instances) != 1 || r.Instances[0].State != api.RunInstanceStopped {
			t.Fatalf("run %+v: want DeadlineExceeded with its instance stopped", r)
		}
		t.Logf("deadline 10s: the run failed %s after its start", r.CompletionTime.Sub(r.StartTime).Round(time.Millisecond))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		if err := poll.Wait(ctx, func() (bool, error) { return len(containerIDs(t, c.Node, slow)) == 0, nil }); err != nil {
			t.Fatalf("the stopped instance's container is still there: %v", err)
		}
		waitStatus(t, c, "default/"+slow, "Failed with DeadlineExceeded", func(d *api.WorkloadDetail) bool {
			for _, cond := range d.Status.Conditions {
				if cond.Type == "Stalled" && cond.Reason == api.RunReasonDeadlineExceeded {
					return d.Status.Phase == api.PhaseFailed
				}
			}
			return false
		})
	})

	t.Run("schedule", func(t *testing.T) {
		t.Parallel()
		waitStatus(t, c, "default/"+cron, "Scheduled with a next run time", func(d *api.WorkloadDetail) bool {
			return d.Status.NextRunTime != nil && (d.Status.Phase == api.PhaseScheduled || d.Status.Phase == api.PhaseRunning)
		})
		runs := waitRuns(t, c, cron, "two finished runs", 4*time.Minute, func(rs []api.JobRun) bool {
			done := 0
			for _, r := range rs {
				if r.State == api.RunSucceeded {
					done++
				}
			}
			return done >= 2
		})
		for i := 1; i < len(runs); i++ {
			a, b := runs[i-1], runs[i]
			if got := b.ScheduledTime.Sub(a.ScheduledTime); got != 10*time.Second {
				t.Errorf("runs %s and %s are %s apart by schedule, want 10s", a.Run, b.Run, got)
			}
			t.Logf("@every 10s: runs %s and %s started %s apart", a.Run, b.Run, b.StartTime.Sub(a.StartTime).Round(time.Millisecond))
		}
		for _, r := range runs {
			if r.ScheduledTime.IsZero() || r.StartTime.Before(r.ScheduledTime) {
				t.Errorf("run %+v started before its firing", r)
			}
			t.Logf("@every 10s: run %s started %s after its firing", r.Run, r.StartTime.Sub(r.ScheduledTime).Round(time.Millisecond))
		}
		// The wire form katcall get jobs -o json prints.
		res := c.Katcall(context.Background(), "get", "jobs", "-o", "json")
		var raw []map[string]any
		if err := json.Unmarshal([]byte(res.Stdout), &raw); res.Code != 0 || err != nil || len(raw) == 0 {
			t.Fatalf("katcall get jobs -o json: %s (%v)", res, err)
		}
		for _, field := range []string{"namespace", "name", "run", "state", "succeeded", "failed", "active", "startTime", "completionTime", "reason"} {
			if _, ok := raw[0][field]; !ok {
				t.Errorf("katcall get jobs -o json: no %q in %v", field, raw[0])
			}
		}
		if res := c.Katcall(context.Background(), "get", "jobs"); res.Code != 0 || !strings.Contains(res.Stdout, cron) ||
			!strings.Contains(res.Stdout, "SUCCEEDED") {
			t.Errorf("katcall get jobs: %s", res)
		}
	})
}
