// Package node is one kat-agent process: it prepares the node's data
// directory (node state, cluster CA and node certificate, tokens), opens the
// state store (an embedded etcd, or an external one), and runs the node's two
// programs: the agent loop with its API and heartbeat on every node, and,
// while this node is elected leader, the leader's loops and the cluster API.
//
//	n, err := node.Open(ctx, node.Options{ConfigPath: "cluster.kat", DataDir: "/var/lib/kat"}, log)
//	if err != nil { ... }
//	defer n.Close()
//	err = n.Run(ctx) // until ctx ends; containers keep running
//
// cmd/kat-agent only turns flags into Options.
//
// # Data directory
//
// The first Open of a directory creates the cluster from cluster.kat: a
// cluster UID, the CA and this node's certificate (pki/), an admin token and
// a join token (only their SHA-256 enter etcd), the embedded etcd (etcd/) and
// node.json, a cache of what the node needs before etcd runs. A later Open
// resumes: same CA, tokens and state; cluster.kat is fixed at the first
// init, and Options override only this node's name, address and ports. A
// refused cluster.kat or option creates nothing.
//
// # Leadership
//
// The init node and the etcd members (kat-agent join --etcd-peer) campaign;
// workers do not. The leader (reconcile.Leadership) ensures the cluster's
// base records, records its API endpoint, serves the API and runs Git sync,
// app-repository resolution, placement, workload status, DNS records and
// backups until it loses leadership. Every member listens on the API port all along: while it does
// not lead, it forwards requests to the leader etcd names (apiFront).
//
// # etcd members
//
// A member joins as an etcd learner the leader adds (within cluster.kat's
// spec.etcdMembers), with the CA key and tokens the join answer hands it,
// and promotes itself once caught up. Deleting a member node removes it
// from the etcd quorum first (ForgetNode).
package node
