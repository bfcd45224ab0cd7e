// Package resources is KAT's cluster state as typed records in the
// [store.StateStore]: the etcd key schema, namespaces, workloads (desired
// manifests, metadata, archive and status), nodes and cluster configuration.
// The records themselves are package api's, stored as they are; this
// package owns where they live and how they are written together.
//
// Everything that writes desired state goes through this package, so the rules
// hold whichever way the change arrived (katcall apply, a Git source, a
// rollback):
//
//	repo := resources.New(st)
//	res, err := repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()})
//
// # Generations
//
// A workload's generation starts at 1 and moves only when its spec hash
// changes; applying the same spec again changes nothing. Every generation
// written is also kept under the archive prefix, but only the newest
// [DefaultArchiveKeep] (WithArchiveKeep) of them: older ones are deleted in
// the transaction that archives a new one. The previous version is always
// there for a rollback (docs/architecture.md "Identity").
//
// # Atomicity
//
// The manifests, the metadata and the archive entry of one apply (and the
// deletion of archived generations past the newest kept) are written in a
// single etcd transaction guarded by the metadata's
// revision and the namespace's revision; a concurrent writer of the same
// workload makes the transaction fail and it is retried from a fresh read.
// Writers of different workloads never conflict. A namespace is deleted only in
// a transaction that also checks no workload exists under it. A reader
// therefore never sees half an apply, nor a workload without its namespace.
//
// # Ownership
//
// Each workload records its owner: "api" or "git" (source, path, commit). An API
// write to a Git-owned workload is refused with an [*OwnershipError] unless
// forced, which also marks the workload suspended from Git management.
//
// # Capped lists
//
// Events (/kat/events/, [Repo.AppendEvent]) and the API's audit log
// (/kat/audit/, [Repo.AppendAudit]) are lists whose keys sort by time; each
// append deletes the oldest entries beyond the list's cap.
//
// # What nodes report
//
// A node's facts, its status (the heartbeat), its build records and its
// events, are recorded by [NodeFacts], whichever road they took: the API
// server records with one what workers send it, a member records its own
// with another. An unchanged heartbeat writes only its time
// ([Repo.RecordHeartbeat]), fenced by the version of the node's
// registration.
package resources
