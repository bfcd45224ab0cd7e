package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// TestEventsOfAPIWrites checks that applies and deletes through the API
// are events that carry the object's kind, namespace, name and uid, and
// that the filters of GET /v1alpha1/events select them.
func TestEventsOfAPIWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	res, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err) // unchanged: no event
	}
	if _, err := f.client.DeleteWorkload(ctx, "default", "web", false); err != nil {
		t.Fatal(err)
	}
	if err := f.repo.RecordEvent(ctx, api.NodeRef("n1", "u1"), api.EventWarning, "NodeNotReady", "no heartbeat"); err != nil {
		t.Fatal(err)
	}
	// An event recorded the old way, with only its Object string.
	if err := f.repo.AppendEvent(ctx, api.Event{Type: api.EventNormal, Object: "source/config", Reason: "Applied"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		q    apiclient.EventQuery
		want []string // Object Reason UID, oldest first
	}{
		{name: "all", want: []string{"workload/default/web Created " + res.Workload.UID,
			"workload/default/web Deleted " + res.Workload.UID, "node/n1 NodeNotReady u1", "source/config Applied "}},
		{name: "namespace", q: apiclient.EventQuery{Namespace: "default"}, want: []string{
			"workload/default/web Created " + res.Workload.UID, "workload/default/web Deleted " + res.Workload.UID}},
		{name: "kind of an old record", q: apiclient.EventQuery{Kind: api.KindSource}, want: []string{"source/config Applied "}},
		{name: "name", q: apiclient.EventQuery{Name: "n1"}, want: []string{"node/n1 NodeNotReady u1"}},
		{name: "type", q: apiclient.EventQuery{Type: api.EventWarning}, want: []string{"node/n1 NodeNotReady u1"}},
		{name: "kind and limit", q: apiclient.EventQuery{Kind: api.KindWorkload, Limit: 1}, want: []string{"workload/default/web Deleted " + res.Workload.UID}},
		{name: "since a duration", q: apiclient.EventQuery{Since: "1h", Kind: api.KindNode}, want: []string{"node/n1 NodeNotReady u1"}},
		{name: "since a time to come", q: apiclient.EventQuery{Since: time.Now().Add(time.Hour).Format(time.RFC3339)}, want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := f.client.ListEventsMatching(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.Object+" "+e.Reason+" "+e.UID)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestEventFilterRefusesBadValues checks that a bad filter is a 400 that
// names its parameter.
func TestEventFilterRefusesBadValues(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.refusesNaming(t, "/v1alpha1/events?", []badQuery{
		{"kind=pod", "kind"},
		{"type=Error", "type"},
		{"since=yesterday", "since"},
		{"since=-5m", "since"},
		{"limit=x", "limit"},
		{"watch=maybe", "watch"},
	})
}

// badQuery is a query an endpoint refuses, and the parameter its answer
// names.
type badQuery struct{ query, param string }

// refusesNaming checks that GET prefix+query answers 400 with a message
// that names the parameter, for each of bad.
func (f *fixture) refusesNaming(t *testing.T, prefix string, bad []badQuery) {
	t.Helper()
	for _, tc := range bad {
		t.Run(tc.query, func(t *testing.T) {
			code, e := f.raw(t, http.MethodGet, prefix+tc.query, token, nil)
			if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.param) {
				t.Fatalf("GET %s%s: %d %q, want 400 naming %s", prefix, tc.query, code, e.Message, tc.param)
			}
		})
	}
}

// TestWatchEvents checks that a watch sends the matching events there are,
// then each new matching one as it is recorded, and nothing else.
func TestWatchEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.repo.RecordEvent(ctx, api.WorkloadRef("default", "web", ""), api.EventNormal, "Before", "old"); err != nil {
		t.Fatal(err)
	}
	got := make(chan api.Event)
	done := make(chan error, 1)
	go func() {
		done <- f.client.WatchEvents(ctx, apiclient.EventQuery{Kind: api.KindWorkload}, func(e api.Event) error {
			select {
			case got <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	next := func() api.Event {
		t.Helper()
		select {
		case e := <-got:
			return e
		case err := <-done:
			t.Fatalf("watch ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no event within 30s")
		}
		return api.Event{}
	}
	if e := next(); e.Reason != "Before" {
		t.Fatalf("first event %+v, want the one recorded before the watch", e)
	}
	if err := f.repo.RecordEvent(ctx, api.NodeRef("n1", ""), api.EventNormal, "Other", "filtered out"); err != nil {
		t.Fatal(err)
	}
	if err := f.repo.RecordEvent(ctx, api.WorkloadRef("default", "db", "u"), api.EventWarning, "After", "new"); err != nil {
		t.Fatal(err)
	}
	if e := next(); e.Reason != "After" || e.Kind != api.KindWorkload || e.Name != "db" || e.UID != "u" {
		t.Fatalf("second event %+v, want the workload event recorded during the watch", e)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("watch ended with %v", err)
	}
}
