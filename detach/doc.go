// Package detach is what a worker does when it loses its cluster and when
// it finds it again (docs/detached.md): it tells when the cluster is lost
// (WaitLost) and back (WaitBack), seeds the node's own single-node control
// plane with what the node runs (Seed), and lists the workloads created
// there to hand back as it rejoins (LocalWorkloads). Package node wires it:
// the control plane is the one kat-agent init runs, opened in a directory
// of its own.
package detach
