// Package kat is the root of the KAT module: a container orchestrator for
// small clusters, driven by Git.
//
// The code lives in the packages below, one layer per top-level folder;
// docs/architecture.md "Layers" lists them from top to bottom, with what each
// owns, and layout_test.go enforces that imports point downwards in that
// order. The commands are cmd/kat-agent (every node) and cmd/katcall (the
// client).
//
// This package holds no code, only the tests that keep those rules and keep
// the docs true to the code.
package kat
