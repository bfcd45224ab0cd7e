// Package e2e holds KAT's end-to-end tests: they build kat-agent and katcall,
// run them as real processes against a real embedded etcd in a temporary data
// directory, and check what an operator would see.
//
//	go test -race ./scripts/e2e
//	go test -run '^$' -bench ApplyWorkloads -benchtime 1x ./scripts/e2e
//
// # Harness
//
// A [Cluster] is one kat-agent started with "init" on free loopback ports. It
// can be killed (SIGKILL), stopped (SIGTERM) or, started in a process group of
// its own ([Cluster.OwnGroup]), interrupted as by ^C in a terminal, and
// started again on the same data directory. [Cluster.Katcall] runs the katcall binary with the cluster's
// configuration and returns its exit code and output.
package e2e
