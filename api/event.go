package api

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)

// Kinds of the objects events are about (ObjectRef.Kind). They are the
// first segment of an event's Object string.
const (
	KindWorkload  = "workload"
	KindSource    = "source"
	KindNode      = "node"
	KindInstance  = "instance"
	KindNamespace = "namespace"
	// KindCertificate is an ingress certificate: its kind (file or acme)
	// stands where a namespace would ("certificate/acme/shop.example.com").
	KindCertificate = "certificate"
)

// EventKinds lists every kind an event may be about, for validation.
var EventKinds = []string{KindWorkload, KindSource, KindNode, KindInstance, KindNamespace, KindCertificate}

// ObjectRef names the object an event is about.
type ObjectRef struct {
	// Kind is one of EventKinds, such as "workload".
	Kind string `json:"kind,omitempty"`
	// Namespace is the object's namespace; empty for cluster-wide objects
	// (nodes, sources, namespaces).
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name (an instance's ID for KindInstance).
	Name string `json:"name,omitempty"`
	// UID is the object's UID when the emitter knows it. Default empty.
	UID string `json:"uid,omitempty"`
}

// WorkloadRef is the reference of workload ns/name.
func WorkloadRef(ns, name, uid string) ObjectRef {
	return ObjectRef{Kind: KindWorkload, Namespace: ns, Name: name, UID: uid}
}

// NodeRef is the reference of node name.
func NodeRef(name, uid string) ObjectRef { return ObjectRef{Kind: KindNode, Name: name, UID: uid} }

// InstanceRef is the reference of instance id of a workload in namespace ns.
func InstanceRef(ns, id string) ObjectRef {
	return ObjectRef{Kind: KindInstance, Namespace: ns, Name: id}
}

// CertificateRef is the reference of the ingress certificate of kind
// (CertificateFile or CertificateACME) and name.
func CertificateRef(kind, name string) ObjectRef {
	return ObjectRef{Kind: KindCertificate, Namespace: kind, Name: name}
}

// SourceRef is the reference of the config-repo source name.
func SourceRef(name string) ObjectRef { return ObjectRef{Kind: KindSource, Name: name} }

// Path is the reference as an Event's Object: "kind/ns/name", or
// "kind/name" without a namespace.
func (o ObjectRef) Path() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Event returns an event of type typ (EventNormal or EventWarning) about
// o, its Object filled in: the one way to make an event, so every record
// carries kind, namespace, name and uid. Its Time is set when it is
// recorded.
func (o ObjectRef) Event(typ, reason, message string) Event {
	return Event{Type: typ, Object: o.Path(), ObjectRef: o, Reason: reason, Message: message}
}

// Eventf is Event with a formatted message.
func (o ObjectRef) Eventf(typ, reason, format string, args ...any) Event {
	return o.Event(typ, reason, fmt.Sprintf(format, args...))
}

// ParseObject reads an Event's Object string ("workload/demo/web",
// "source/config") back into a reference without a UID; ok is false for a
// string of another form.
func ParseObject(s string) (ref ObjectRef, ok bool) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return ObjectRef{Kind: parts[0], Name: parts[1]}, true
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return ObjectRef{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, true
	}
	return ObjectRef{}, false
}

// Event is something that happened to an object, kept under /kat/events/.
type Event struct {
	Time time.Time `json:"time"`
	// Type is EventNormal or EventWarning.
	Type string `json:"type"`
	// Object names what the event is about, such as "source/config" or
	// "workload/demo/web": ObjectRef.Path of the embedded reference.
	// Events recorded before the reference existed carry only Object;
	// Normalize fills one in from the other.
	Object string `json:"object"`
	// ObjectRef is the object's kind, namespace, name and uid.
	ObjectRef
	// Reason is a CamelCase word, such as "Applied" or "PruneRefused".
	Reason string `json:"reason"`
	// Message says what happened.
	Message string `json:"message"`
}

// Normalize makes Object and ObjectRef agree: an event that carries only
// one of them (an older emitter's, or a stored record from before the
// reference existed) gets the other.
func (e *Event) Normalize() {
	switch {
	case e.Kind != "" && e.Object == "":
		e.Object = e.Path()
	case e.Kind == "" && e.Object != "":
		if ref, ok := ParseObject(e.Object); ok {
			e.ObjectRef = ref
		}
	}
}

// EventFilter selects events; an empty field matches every event.
type EventFilter struct {
	// Namespace matches the object's namespace.
	Namespace string
	// Kind matches the object's kind (one of EventKinds).
	Kind string
	// Name matches the object's name.
	Name string
	// Type matches EventNormal or EventWarning.
	Type string
	// Since matches events at or after it. Default zero: all.
	Since time.Time
}

// Match reports whether e (normalized) passes f.
func (f EventFilter) Match(e Event) bool {
	return (f.Namespace == "" || e.Namespace == f.Namespace) &&
		(f.Kind == "" || e.Kind == f.Kind) &&
		(f.Name == "" || e.Name == f.Name) &&
		(f.Type == "" || e.Type == f.Type) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since))
}

// Event filter query parameters of GET /v1alpha1/events.
const (
	EventParamNamespace = "namespace"
	EventParamKind      = "kind"
	EventParamName      = "name"
	EventParamType      = "type"
	EventParamSince     = "since"
)

// ParseSince reads a "since" value: an RFC 3339 time, or a duration
// ("10m", "2h") counted back from now.
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a positive duration such as 10m", v)
	}
	return now.Add(-d), nil
}

// ParseEventFilter reads an EventFilter from the query of GET
// /v1alpha1/events; a since duration counts back from now. Its error names
// the parameter that is wrong.
func ParseEventFilter(get func(string) string, now time.Time) (EventFilter, error) {
	f := EventFilter{Namespace: get(EventParamNamespace), Kind: get(EventParamKind),
		Name: get(EventParamName), Type: get(EventParamType)}
	if f.Kind != "" && !slices.Contains(EventKinds, f.Kind) {
		return f, fmt.Errorf("%s: %q is not one of %s", EventParamKind, f.Kind, strings.Join(EventKinds, ", "))
	}
	if f.Type != "" && f.Type != EventNormal && f.Type != EventWarning {
		return f, fmt.Errorf("%s: %q is neither %s nor %s", EventParamType, f.Type, EventNormal, EventWarning)
	}
	if v := get(EventParamSince); v != "" {
		t, err := ParseSince(v, now)
		if err != nil {
			return f, fmt.Errorf("%s: %w", EventParamSince, err)
		}
		f.Since = t
	}
	return f, nil
}

// ContentTypeNDJSON is the media type of a watch of events: one JSON
// Event a line (an empty line is a keepalive).
const ContentTypeNDJSON = "application/x-ndjson"
