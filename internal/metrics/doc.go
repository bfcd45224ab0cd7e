// Package metrics holds KAT's Prometheus metrics: one registry of the
// process, every kat_ family in it, and the one-line functions the
// instrumented code calls. A newcomer finds here every metric KAT exports;
// the README's Metrics section lists them for operators.
//
//	start := time.Now()
//	err := fetch(ctx)
//	metrics.GitFetched(source, start, err)
//
//	http.Handle("/metrics", metrics.Handler())
//
// # Registry
//
// The families live in a registry of KAT's own, with the Go runtime and
// process collectors, never in Prometheus's default registry: the embedded
// etcd registers its own families there, and they are not part of KAT's
// metrics. Handler serves the registry in the Prometheus text format; the
// kat-agent serves it at /metrics on the agent port of every node and on
// the API port of the leader.
//
// # Labels
//
// Every label value comes from a bounded set: source, loop and node names,
// webhook providers and reasons, results and states. Container IDs,
// commits and instance IDs never become labels.
//
// # Tests
//
// Value reads one series of the registry, so a test checks that its event
// moved the family it should.
package metrics
