package api

import (
	"strings"
	"time"
)

// Actors of audit entries besides "node:NAME" and "webhook:PROVIDER".
const (
	// ActorAdmin is a caller holding the admin token.
	ActorAdmin = "admin"
	// ActorJoinToken is a node joining with the join token.
	ActorJoinToken = "join-token"
	// ActorAnonymous is a caller that showed no valid credential: its
	// request was refused.
	ActorAnonymous = "anonymous"
)

// AuditEntry is one mutating API call or webhook, as the leader's audit
// log keeps it. It never holds a token, a secret or a request body.
type AuditEntry struct {
	// Time is when the call was answered.
	Time time.Time `json:"time"`
	// Actor is who made the call: ActorAdmin, "node:NAME" (a node's
	// certificate, CN NAME), "webhook:PROVIDER", ActorJoinToken or
	// ActorAnonymous.
	Actor string `json:"actor"`
	// Verb is what was asked: apply, create, delete, cordon, drain, sync,
	// rollback, push, join, ...
	Verb string `json:"verb"`
	// Resource is the kind of object: workload, namespace, node, source,
	// repo (a webhook's), build, join-token, ...
	Resource string `json:"resource"`
	// Namespace is the object's namespace, for namespaced kinds.
	Namespace string `json:"namespace,omitempty"`
	// Name is the object's name (a webhook's repository URL, without
	// credentials); empty for a call on a whole collection.
	Name string `json:"name,omitempty"`
	// Detail is what else the call named: a webhook's ref, a build's
	// commit.
	Detail string `json:"detail,omitempty"`
	// Status is the HTTP status of the answer.
	Status int `json:"status"`
	// Error is the start of the error message of a refused or failed call.
	Error string `json:"error,omitempty"`
	// Remote is the caller's IP address.
	Remote string `json:"remote,omitempty"`
}

// Object returns the entry's object as "resource/namespace/name", leaving
// out empty parts.
func (e AuditEntry) Object() string {
	parts := []string{e.Resource}
	for _, p := range []string{e.Namespace, e.Name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// AuditQuery selects audit entries. The zero value asks for the server's
// default number of the newest entries.
type AuditQuery struct {
	// Limit is how many of the newest matching entries to return; 0: the
	// server's default (100).
	Limit int
	// Actor keeps entries of this actor; one ending in ":" ("node:") keeps
	// every actor it starts.
	Actor string
	// Resource keeps entries whose Object is this or starts with it
	// followed by "/": "workload", "workload/default", "node/n2".
	Resource string
}
