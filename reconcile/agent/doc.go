// Package agent is the node agent's local loop: it makes the node's
// containers match the assignments the leader wrote for it under
// /kat/assignments/{node}/, and reports what it sees.
//
//	ag, err := agent.NewAgent(agent.AgentConfig{Repo: repo, Node: "n1", Runtime: podman, BuildSpec: specs})
//	go ag.Run(ctx) // until ctx ends; containers keep running
//	go agent.RunHeartbeat(ctx, agent.HeartbeatConfig{Node: "n1", Post: agent.LeaderReporter(repo, caPEM, cert),
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
// # Builds
//
// An assignment that carries a build reference (a workload built from an app
// repository) is built on the node with a [Builder] instead of pulled; the
// build record goes under /kat/builds/{ns}/{name}/{commit12}/{node}
// ([BuildRecords]), the only fact about builds the leader reads.
//
// # Heartbeat
//
// [RunHeartbeat] reports the node's resources, conditions and every
// instance (spec §4.1.3) each agent tick, and at once when an instance
// changes, to the leader's API ([LeaderReporter]).
package agent
