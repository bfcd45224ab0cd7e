// Package leader holds the leader's loops. They run only while this node
// leads (reconcile.Leadership starts and stops them) and keep no state that
// etcd does not hold.
//
// # Placement
//
// [Leader.Loops] returns a term's loops. The placement loop
// (placementpass.go) plans the instances of the workloads whose facts
// changed with the pure [PlanAssignments] (assign.go, planner.go: where each
// instance runs, with the scheduler in package sched) and writes the plan;
// the status loop (statuspass.go) derives their statuses; both share the
// loop machinery of loop.go, woken by the view (view.go), which follows
// etcd. Two clocks (clocks.go) wake the loops when a node turns NotReady and
// when a workload asked for a pass at a given time (drain delays, progress
// deadlines). A changed template starts new instances first; the old ones
// are removed once the new ones are ready (running, and healthy where a
// health check is defined).
//
// # Jobs
//
// A Job runs in runs: one per generation, or one per firing of its cron
// schedule. The leader records each run under
// /kat/jobs/{ns}/{name}/runs/{run} (and a scheduled Job's last firing under
// /kat/jobs/{ns}/{name}/schedule) and labels the run's assignments with it.
// Each placement pass derives a Job's next step from those records, its
// assignments and the instances' reports with the pure planJob (jobs.go):
// instances up to parallelism until completions succeed, a failed instance
// retried up to backoffLimit, the deadline, the concurrency policy, missed
// firings skipped, and the history limits. The records are written after the
// assignments, guarded by their versions, so a new leader continues a run
// without duplicating or losing an instance.
//
// # Workload status
//
// Each workload's status is derived, by one loop only, from facts that each
// producer writes under its own keys: the desired spec (apply, gitsync), the
// Git source's per-path errors (gitsync), the resolved app commit (app
// sources), the placements (placement), the build records (agents) and the
// instance states (heartbeats). [DeriveWorkloadStatus] is that derivation,
// a pure function: the order in which facts arrive never changes the result.
//
// # Push to deploy
//
// [AppSources] resolves the app repository of every workload built from Git
// (workload.kat spec.source.git) to one commit, on a poll interval or at
// once on a verified webhook (it is a webhook.Dispatcher; combine it with the
// config sources' through webhook.Fanout), and records it under
// /kat/appsources/{ns}/{name}. Placement gives such workloads instances of
// that commit with image kat-local/{ns}_{name}:{commit12}; a new commit is a
// rollout.
package leader
