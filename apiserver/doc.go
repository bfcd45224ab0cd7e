// Package apiserver is the leader's v1alpha1 HTTP API server:
// routing (chi), authentication, size and rate limits, the error format, and
// the agent API each node serves on its agent port. The records it serves
// are package api's; the client is package apiclient, which links neither
// this package nor etcd.
//
//	srv, err := apiserver.New(apiserver.Config{Repo: repo, AdminTokenHash: hash})
//	httpSrv := &http.Server{Handler: srv.Handler(), TLSConfig: tlsCfg}
//
// # Endpoints
//
//	GET    /healthz                                   no authentication
//	GET    /metrics                                   admin token, a node's or a metrics certificate
//	GET    /v1alpha1/cluster/ca                       the cluster CA certificate, no authentication
//	POST   /v1alpha1/join                             a node joins (join token; with --etcd-peer also the admin token)
//	POST   /v1alpha1/webhooks/{provider}              a push webhook (its provider's signature, see package webhook)
//	GET    /v1alpha1/status                           cluster summary for katcall status
//	GET    /v1alpha1/config/cluster                   the cluster configuration, sanitised
//	GET    /v1alpha1/cluster/servers                  the members' API URLs, the leader's first
//	POST   /v1alpha1/cluster/backup                   an etcd snapshot now
//	GET    /v1alpha1/namespaces                       POST creates (body: namespace.kat)
//	GET    /v1alpha1/namespaces/{ns}                  PUT replaces labels, DELETE removes an empty one
//	GET    /v1alpha1/workloads                        every namespace
//	GET    /v1alpha1/n/{ns}/workloads                 POST creates, PUT creates or updates (body: tar.gz of a Quadlet directory)
//	GET    /v1alpha1/n/{ns}/workloads/{name}          PUT creates or updates, DELETE removes
//	GET    /v1alpha1/n/{ns}/workloads/{name}/files/{file}
//	GET    /v1alpha1/n/{ns}/workloads/{name}/status   with its instances and builds; also /history and /rollout
//	GET    /v1alpha1/n/{ns}/workloads/{name}/logs     an instance's log (?instance=, ?follow=) or, with ?build=true, a build's, from its node
//	POST   /v1alpha1/n/{ns}/workloads/{name}/suspend  also /resume (Git management) and /rollback
//	GET    /v1alpha1/sources                          and /v1alpha1/sources/{source}: PUT creates or replaces, DELETE removes
//	POST   /v1alpha1/sync                             every source now; /v1alpha1/sources/{source}/sync one
//	GET    /v1alpha1/events                           the newest events
//	GET    /v1alpha1/jobs                             every Job run
//	GET    /v1alpha1/nodes                            and /v1alpha1/nodes/{node}
//	DELETE /v1alpha1/nodes/{node}                     ?force=true: even a Ready node with instances
//	POST   /v1alpha1/nodes/{node}/cordon              also uncordon, drain (no body)
//	PATCH  /v1alpha1/nodes/{node}/labels              JSON merge patch: {"k": "v", "gone": null}
//	PATCH  /v1alpha1/nodes/{node}/taints              {"add": [taint], "remove": [{key, effect}], "overwrite": bool}
//	POST   /v1alpha1/join-token                       a new join token; the old one stops working
//	POST   /v1alpha1/metrics-certificates             sign a metrics certificate's CSR
//	POST   /v1alpha1/nodes/{node}/status              a node's heartbeat (node certificate or token)
//	PUT    /v1alpha1/nodes/{node}/builds/{ns}/{name}/{commit}   a node's build record (node certificate or token)
//	POST   /v1alpha1/nodes/{node}/events              an event a node reports (node certificate or token)
//	POST   /v1alpha1/nodes/{node}/depart              the node's agent leaves for good (node certificate or token)
//	POST   /v1alpha1/nodes/{node}/handback            a rejoining detached node hands back its local workloads (node certificate or token)
//	GET    /v1alpha1/audit                            the audit log: ?limit= (default 100), ?actor=, ?resource=
//
// The agent API each node serves on its agent port ([AgentHandler]) has
// /healthz, /metrics, /v1alpha1/instances/{id}/logs and
// /v1alpha1/builds/{ns}/{name}/{commit}/log; its TLS admits client
// certificates of the cluster CA only.
//
// # Errors
//
// Every error is a JSON body {"error": code, "message": details}, with
// "details" listing each invalid field (file, line, field, message) when a
// Quadlet was refused. Status codes: 400 malformed request or archive, 401
// missing or wrong bearer token, 404 unknown namespace, workload or file, 409
// conflict (already exists, owned by Git, namespace not empty), 413 body or
// archive too large, 415 a body whose Content-Type the endpoint does not take
// (archives: application/gzip; namespace.kat: application/yaml; the rest:
// application/json; label changes also application/merge-patch+json), 422 a Quadlet that does not validate, 429 rate limited.
// A refused request changes no state.
//
// # Authentication
//
// Every endpoint but /healthz needs "Authorization: Bearer TOKEN" with the
// admin token printed by kat-agent init. Only the token's SHA-256 is kept in
// etcd, and it is compared in constant time. The /v1alpha1/nodes/{node}/...
// routes a node writes its facts with also take a client certificate of the
// cluster CA whose common name is {node}: a worker's etcd user may not write,
// so this is the only way its facts reach etcd, and only its own.
//
// # Audit log
//
// Every mutating call (POST, PUT, PATCH, DELETE) and every webhook is
// recorded after it was answered, in the capped etcd list under
// /kat/audit/ (resources.AppendAudit, Config.AuditKeep entries) and
// as one log line of Config.AuditLogger: the actor (the credential
// that authenticated it: "admin", "node:NAME", "webhook:PROVIDER",
// "join-token" or "anonymous"), the verb, the object, the status and a
// refusal's message; never a token, a secret or a body. Node heartbeats
// and the events nodes report are left out (auditExcluded), and so are 429
// answers and requests that match no route; calls without a valid
// credential are stored at most AuditUnauthenticatedLimit a minute (all
// are logged). The answer waits for the etcd
// write at most two seconds; a failed write is logged and changes nothing
// else. A refused request changes no state but this log.
package apiserver
