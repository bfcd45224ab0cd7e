package main

import (
	"context"
	"time"

	"kat.dws.rip/kat/apiclient"
)

// runGetEvents is katcall get events: the newest events of the cluster.
func runGetEvents(ctx context.Context, c *apiclient.Client, g *globals, f outputFormat) error {
	evs, err := c.ListEvents(ctx, 50)
	if err != nil {
		return err
	}
	if f != formatTable {
		return printData(g.stdout, f, evs)
	}
	now := time.Now()
	t := newTable(g.stdout, "AGE", "TYPE", "OBJECT", "REASON", "MESSAGE")
	for _, e := range evs {
		t.row(age(now, e.Time), e.Type, e.Object, e.Reason, oneLine(e.Message))
	}
	return t.flush()
}
