// Package reconcile holds what KAT's control loops share, and leadership.
//
// KAT runs two programs in every kat-agent: the node's agent loop
// (package reconcile/agent), which makes the node's containers match its
// assignments, and, on the elected leader only, the leader's loops (package
// reconcile/leader): placement, workload status, DNS records, app sources.
// Every loop is level-triggered: it recomputes the next step from the
// desired and observed state in etcd on every pass, woken by watches
// (through [Poke] and [Forward], which coalesce bursts) and a periodic
// resync, so a lost event or a restart never loses work
// (docs/architecture.md "Level-triggered loops").
//
// # Leadership
//
// [Leadership] campaigns for the cluster's leadership through the state
// store's election and, while this node leads, runs the loops of a [Term]:
//
//	l := &reconcile.Leadership{Store: st, ID: "n1", Term: func(ctx context.Context) ([]reconcile.Loop, error) {
//		return []reconcile.Loop{{Name: "placement", Run: placement.Run}}, nil
//	}}
//	err := l.Run(ctx) // until ctx ends; resigns then
//
// When leadership is lost every loop of the term is stopped before the node
// campaigns again; a new term starts them afresh from etcd.
package reconcile
