// Package reconcile holds KAT's control loops: the leader's loops (scheduling,
// rollouts, jobs, node lifecycle) and each agent's local loop.
//
// Every loop is level-triggered: it recomputes the next step from the desired
// and observed state in etcd on every pass, woken by watches and a periodic
// resync, so a lost event or a restart never loses work.
//
// # Node heartbeat
//
// [RunHeartbeat] reports this node's status (spec §4.1.3) every agent tick.
// Until agents report over the API, the leader runs it for itself, writing the
// status record directly.
//
//	err := reconcile.RunHeartbeat(ctx, reconcile.HeartbeatConfig{Repo: repo, Node: "n1", Interval: 15 * time.Second})
//
// Agents report over the API (HeartbeatConfig.Post) with their instances.
//
// # Assignments and workload status (leader)
//
// [RunAssigner] places instances until the scheduler exists: every instance
// on the leader's node, decided by the pure [PlanAssignments], and derives
// every workload's status from the agents' reports with the pure
// [DeriveWorkloadStatus]. A changed template starts new instances first;
// the old ones are removed once the new ones are ready (running, and healthy
// where a health check is defined). The status derivation owns the Ready,
// Reconciling/Progressing and Stalled/InstanceFailed conditions and keeps
// every other writer's (gitsync's Stalled/InvalidQuadlet, the agents'
// BuildFailed), writing by compare-and-swap.
//
// # Push to deploy (leader and agent)
//
// [AppSources] resolves the app repository of every workload built from Git
// (workload.kat spec.source.git) to one commit, on a poll interval or at
// once on a verified webhook (it is a webhook.Dispatcher; combine it with the
// config sources' through webhook.Fanout), and records it under
// /kat/appsources/{ns}/{name}. The assigner gives such workloads instances of
// that commit with image kat-local/{ns}_{name}:{commit12}; a new commit is a
// rollout. The agent builds those images with its [Builder] instead of
// pulling, records builds under /kat/builds, sets the BuildFailed condition
// (and an event) when a build fails, and runs the Builder's housekeeping
// after a rollout removed an old instance.
//
// # The agent loop
//
// [Agent] watches /kat/assignments/{node}/, lists the node's containers
// (runtime events and a periodic resync), and takes the single next step per
// instance decided by a pure function: create, start, restart by the restart
// policy, remove, or wait. It runs exec health checks and adopts running
// containers after a restart; stopping it never stops a container.
package reconcile
