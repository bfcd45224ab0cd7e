// Package kat is the root of the KAT module: a container orchestrator for
// small clusters, driven by Git.
//
// The code lives in the packages below, each one concern; DESIGN.md draws the
// map and the direction of imports, which layout_test.go enforces:
//
//	cmd/kat-agent, cmd/katcall   flag parsing and wiring only
//	api                          v1alpha1 HTTP server, auth, client
//	reconcile                    leader loops and the agent's local loop
//	store                        StateStore on etcd (store/resources: KAT's records)
//	quadlet                      the resource model: parsing, validation, spec hash
//	pki                          cluster CA and TLS
//	scripts                      setup, end-to-end tests, benchmarks
//
// This package holds no code, only the tests that keep those rules.
package kat
