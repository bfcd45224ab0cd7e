package api

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestEventNormalize: an event made from a reference carries its Object
// string, and one recorded with only the string gets the reference.
func TestEventNormalize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   Event
		want ObjectRef
		obj  string
	}{
		{"from a reference", WorkloadRef("default", "web", "u1").Event(EventNormal, "Created", ""), WorkloadRef("default", "web", "u1"), "workload/default/web"},
		{"old namespaced string", Event{Object: "workload/default/web"}, ObjectRef{Kind: KindWorkload, Namespace: "default", Name: "web"}, "workload/default/web"},
		{"old cluster-wide string", Event{Object: "source/config"}, SourceRef("config"), "source/config"},
		{"reference without a string", Event{ObjectRef: NodeRef("n1", "")}, NodeRef("n1", ""), "node/n1"},
		{"a string of another form", Event{Object: "something"}, ObjectRef{}, "something"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.in
			e.Normalize()
			if e.ObjectRef != tc.want || e.Object != tc.obj {
				t.Fatalf("normalized to %+v %q, want %+v %q", e.ObjectRef, e.Object, tc.want, tc.obj)
			}
		})
	}
}

// TestParseFilters: the events and logs query parameters, and errors that
// name the parameter.
func TestParseFilters(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	get := func(q string) func(string) string {
		v, _ := url.ParseQuery(q)
		return v.Get
	}
	f, err := ParseEventFilter(get("namespace=default&kind=node&name=n1&type=Warning&since=10m"), now)
	if err != nil || f != (EventFilter{Namespace: "default", Kind: KindNode, Name: "n1", Type: EventWarning, Since: now.Add(-10 * time.Minute)}) {
		t.Fatalf("event filter %+v, %v", f, err)
	}
	o, err := ParseLogOptions(get("follow=true&tail=3&since=2026-11-27T09:00:00Z&timestamps=1"), now)
	if err != nil || o != (LogOptions{Follow: true, Tail: 3, Since: now.Add(-time.Hour), Timestamps: true}) {
		t.Fatalf("log options %+v, %v", o, err)
	}
	if back, err := ParseLogOptions(LogOptions{Tail: 2, Previous: true, Since: now}.Values().Get, now); err != nil || back != (LogOptions{Tail: 2, Previous: true, Since: now}) {
		t.Fatalf("log options round trip: %+v, %v", back, err)
	}
	for _, tc := range []struct{ query, param string }{
		{"kind=pod", "kind"}, {"type=normal", "type"}, {"since=-1m", "since"}, {"since=x", "since"},
	} {
		if _, err := ParseEventFilter(get(tc.query), now); err == nil || !strings.HasPrefix(err.Error(), tc.param+":") {
			t.Errorf("event filter %s: %v, want an error naming %s", tc.query, err, tc.param)
		}
	}
	for _, tc := range []struct{ query, param string }{
		{"tail=-1", "tail"}, {"follow=maybe", "follow"}, {"previous=true&follow=true", "previous"}, {"since=x", "since"},
	} {
		if _, err := ParseLogOptions(get(tc.query), now); err == nil || !strings.HasPrefix(err.Error(), tc.param+":") {
			t.Errorf("log options %s: %v, want an error naming %s", tc.query, err, tc.param)
		}
	}
}
