// Package agent is the node agent's local loop: it makes the node's
// containers match the assignments the leader wrote for it under
// /kat/assignments/{node}/, and reports what it sees.
//
//	var facts agent.Facts = agent.NewLeaderLink("n1", repo, caPEM, cert) // a worker's road
//	ag, err := agent.NewAgent(agent.AgentConfig{Repo: repo, Node: "n1", ClusterUID: uid, Runtime: podman,
//		BuildSpec: specs, Facts: facts})
//	go ag.Run(ctx) // until ctx ends; containers keep running
//	go agent.RunHeartbeat(ctx, agent.HeartbeatConfig{Node: "n1", Facts: facts,
//		Instances: ag.Instances, Conditions: ag.Conditions})
//
// # The loop
//
// [Agent] watches its assignments, lists the node's containers (runtime
// events and a periodic resync), and takes the single next step per instance
// decided by a pure function (decideInstance): create, start, restart by the
// restart policy, remove, or wait. It runs exec health checks and adopts
// running containers after a restart; stopping it never stops a container.
// [NewSpecBuilder] turns an assignment into the container to create
// (package containerspec), in the workload's user namespace slot.
//
// # Its parts
//
// The instance table (instanceTable, table.go) holds what the agent knows
// per instance: its assignment, its container, its state, the step, health
// check or verify command under way, what a step left its container as, the
// host ports reserved for its create. Its methods are the only way to change
// it and keep it consistent; next, the one place a step is chosen, applies
// the pure decisions (decideInstance, probeDue, verifyDue) to it, and
// endStep folds how a step ended into it (afterStep). An instance's back-off
// is its retryState (backoff.go), the one place it is kept. runStep
// (step.go) is the one place a step is run. Around them: the listing and
// the event stream (listing.go), the assignments (assignments.go), the
// images known on the node and their pulls (images.go), the runtime's health
// and the node's RuntimeReady (conditions.go), the node's container network
// (network.go), the instance reports and their change notice (reports.go).
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
// build record goes under /kat/builds/{ns}/{name}/{commit12}/{node} (through
// the node's [Facts]), the only fact about builds the leader reads.
//
// # Heartbeat
//
// [RunHeartbeat] reports the node's resources, conditions and every
// instance each agent tick, and at once when an instance
// changes, through the node's [Facts].
//
// # A node's facts: one road
//
// A node's status, build records and events take one road, its [Facts],
// chosen once where the node is wired. A worker's etcd user reads its
// assignments, its last status, the cluster's configuration, the leader's
// endpoint, every node's overlay record (its WireGuard peers) and the DNS
// records its DNS server answers from, and writes nothing
// (resources.WorkerGrants, docs/architecture.md "Least privilege"): its
// facts go through the leader's API ([LeaderLink]), which takes them only
// for the node named by the client certificate. An etcd member records its
// own with a resources.NodeFacts, the code the leader's API records a
// worker's with.
package agent
