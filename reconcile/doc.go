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
package reconcile
