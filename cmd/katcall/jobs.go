package main

import (
	"context"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// runGetJobs lists the runs of every Job (of namespace ns, of Job name),
// oldest first per Job.
func runGetJobs(ctx context.Context, c *apiclient.Client, g *globals, name, ns string, f outputFormat, now time.Time) error {
	runs, err := c.ListJobRuns(ctx, ns)
	if err != nil {
		return err
	}
	if name != "" {
		runs = filter(runs, func(r api.JobRun) bool { return r.Name == name })
		if len(runs) == 0 {
			return fmt.Errorf("no runs of job %q", name)
		}
	}
	if runs == nil {
		runs = []api.JobRun{}
	}
	if f != formatTable {
		return printData(g.stdout, f, runs)
	}
	t := newTable(g.stdout, "NAMESPACE", "NAME", "RUN", "STATE", "SUCCEEDED", "FAILED", "ACTIVE", "STARTED", "DURATION", "REASON")
	for _, r := range runs {
		end := now
		if r.CompletionTime != nil {
			end = *r.CompletionTime
		}
		t.row(r.Namespace, r.Name, r.Run, r.State, fmt.Sprintf("%d/%d", r.Succeeded, r.Completions), fmt.Sprint(r.Failed),
			fmt.Sprint(r.Active), age(now, r.StartTime)+" ago", end.Sub(r.StartTime).Round(time.Second).String(), orDash(r.Reason))
	}
	return t.flush()
}
