// Package agent is the node agent's local loop: it makes the node's
// containers match the assignments the leader wrote for it under
// /kat/assignments/{node}/, and reports what it sees.
//
//	ag, err := agent.NewAgent(agent.AgentConfig{Repo: repo, Node: "n1", ClusterUID: uid, Runtime: podman, BuildSpec: specs})
//	go ag.Run(ctx) // until ctx ends; containers keep running
//	go agent.RunHeartbeat(ctx, agent.HeartbeatConfig{Node: "n1", Post: agent.NewLeaderLink("n1", repo, caPEM, cert).PostStatus,
//		Instances: ag.Instances, Conditions: ag.Conditions})
//
// # The loop
//
// [Agent] watches its assignments, lists the node's containers (runtime
// events and a periodic resync), and takes the single next step per instance
// decided by a pure function (decideInstance): create, start, restart by the
// restart policy, remove, or wait. It runs exec health checks and adopts
// running containers after a restart; stopping it never stops a container.
// [NewSpecBuilder] turns an assignment into the container to create, in the
// workload's user namespace slot.
//
// # Which containers are the agent's
//
// An agent manages only the containers that carry both its node's name
// (runtime.LabelNode) and its cluster's UID (runtime.LabelCluster), which it
// puts on every container it creates. Its listings and its event stream ask
// for both, and it checks every listed container again, so it never adopts,
// restarts, stops or removes a container of another KAT cluster on the same
// host (two test clusters, a node initialised again into a new cluster) or
// one made by hand. Containers from before the cluster label (LabelManaged
// and this node's name, no LabelCluster) are left alone too, rather than
// adopted on trust: when it starts, the agent logs each such container, and
// each of another cluster, once, for an operator to remove by hand. While
// one of them holds the name of an instance assigned to this node, that
// instance cannot be created and its message says why.
//
// # Builds
//
// An assignment that carries a build reference (a workload built from an app
// repository) is built on the node with a [Builder] instead of pulled; the
// build record goes under /kat/builds/{ns}/{name}/{commit12}/{node}
// ([BuildRecords] on the leader's node, [LeaderLink] on a worker), the only
// fact about builds the leader reads.
//
// # Heartbeat
//
// [RunHeartbeat] reports the node's resources, conditions and every
// instance each agent tick, and at once when an instance
// changes, to the leader's API ([LeaderLink]).
//
// # What a worker may write
//
// A worker's etcd user reads its assignments, its last status, the
// cluster's configuration, the leader's endpoint, every node's overlay
// record (its WireGuard peers) and the DNS records its DNS server answers
// from, and writes nothing (resources.WorkerGrants, docs/architecture.md
// "Least privilege"). Its status, build records and events go through
// the leader's API ([LeaderLink]), which takes them only for the node named
// by the client certificate.
package agent
