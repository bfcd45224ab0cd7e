package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// eventFlags are get's flags for events.
type eventFlags struct {
	kind, typ, since string
	watch            bool
}

var eventFlagNames = []string{"kind", "type", "since", "watch"}

func (f *eventFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.kind, "kind", "", "events only: only events about objects of this kind ("+strings.Join(api.EventKinds, ", ")+")")
	cmd.Flags().StringVar(&f.typ, "type", "", "events only: only events of this type (Normal or Warning)")
	cmd.Flags().StringVar(&f.since, "since", "", "events only: only events since this time (RFC 3339) or for this long (10m, 2h)")
	cmd.Flags().BoolVarP(&f.watch, "watch", "w", false, "events only: keep printing new events as they happen")
}

// refuse reports the event flags given to another kind.
func (f *eventFlags) refuse(cmd *cobra.Command) error {
	for _, fl := range eventFlagNames {
		if cmd.Flags().Changed(fl) {
			return fmt.Errorf("--%s: only get events takes it", fl)
		}
	}
	return nil
}

// query is the events query of the flags, -n and NAME: a name, or an
// object as events show it (workload/default/web, node/n2).
func (f *eventFlags) query(name, namespace string, limit int) (apiclient.EventQuery, error) {
	q := apiclient.EventQuery{Namespace: namespace, Kind: f.kind, Name: name, Type: f.typ, Since: f.since, Limit: limit}
	if ref, ok := api.ParseObject(name); ok {
		if q.Kind != "" && q.Kind != ref.Kind || q.Namespace != "" && q.Namespace != ref.Namespace {
			return q, fmt.Errorf("NAME %q: names another kind or namespace than --kind or --namespace", name)
		}
		q.Kind, q.Namespace, q.Name = ref.Kind, ref.Namespace, ref.Name
	}
	if limit < 0 {
		return q, fmt.Errorf("--limit: %d is negative", limit)
	}
	return q, nil
}

// runGetEvents is katcall get events: the newest events that pass q and,
// with watch, every new one as it happens.
func runGetEvents(ctx context.Context, c *apiclient.Client, g *globals, q apiclient.EventQuery, watch bool, f outputFormat) error {
	if !watch {
		evs, err := c.ListEventsMatching(ctx, q)
		if err != nil {
			return err
		}
		if evs == nil {
			evs = []api.Event{}
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
	return watchEvents(ctx, c, g.stdout, q, f)
}

// watchEvents prints events as the server streams them, one a line, and
// watches again, from the last event printed, when a stream ends (the
// leader changed).
func watchEvents(ctx context.Context, c *apiclient.Client, w io.Writer, q apiclient.EventQuery, f outputFormat) error {
	var last time.Time
	seen := map[string]bool{} // events printed at time last
	show := func(e api.Event) error {
		if e.Time.Before(last) || seen[eventKey(e)] {
			return nil
		}
		if e.Time.After(last) {
			last, seen = e.Time, map[string]bool{}
		}
		seen[eventKey(e)] = true
		switch f {
		case formatJSON:
			return json.NewEncoder(w).Encode(e) // one object a line
		case formatYAML:
			return printData(w, f, e)
		}
		_, err := fmt.Fprintf(w, "%s  %-7s  %s  %s  %s\n", e.Time.Local().Format(time.DateTime), e.Type, e.Object, e.Reason, oneLine(e.Message))
		return err
	}
	for {
		err := c.WatchEvents(ctx, q, show)
		if err == nil || !errors.Is(err, apiclient.ErrStreamEnded) && !retryableWatch(err) {
			return err
		}
		if !last.IsZero() {
			q.Since, q.Limit = last.Format(time.RFC3339Nano), 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// retryableWatch reports whether a watch that failed to start may start on
// a second try: the leader is changing or unreachable for a moment.
func retryableWatch(err error) bool {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.StatusCode == 502 || ae.StatusCode == 503
	}
	return false
}

func eventKey(e api.Event) string { return e.Object + "\x00" + e.Reason + "\x00" + e.Message }
