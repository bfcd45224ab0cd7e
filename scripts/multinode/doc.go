// Package multinode holds the end-to-end tests of a KAT cluster of several
// nodes on one machine: real kat-agent and katcall binaries, one kat-agent
// per host of scripts/harness (a network namespace with its own data
// directory and Podman storage), containers on each host's Podman. The tests
// need root, ip, nsenter, iptables, Podman and busybox-static; they skip
// without them (and fail under KAT_REQUIRE_PREREQS=1, as in task ci).
//
// The package has no code besides its tests.
package multinode
