package resources

import (
	"fmt"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

// NodeNameProblem says what is wrong with name as a node's name, or ""
// when nothing is: it must be a DNS label, and not a name the state store
// reserves for itself (store.RootUser: a node's certificate common name is
// its etcd user).
func NodeNameProblem(name string) string {
	switch {
	case !quadlet.IsDNSLabel(name):
		return fmt.Sprintf("%q must be a DNS label (lowercase letters, digits and '-')", name)
	case name == store.RootUser:
		return fmt.Sprintf("%q is reserved for the state store's administrator", name)
	}
	return ""
}

// WorkerGrants are the etcd rights of a worker node (one that joined):
// reads of what its agent needs and nothing else. It watches its own
// assignments, reads its last reported status (to keep restart counts),
// the cluster's configuration, where the leader's API is, every node's
// overlay record (its WireGuard peers) and the DNS records its DNS server
// answers from, the ingress routes and ACME challenges its proxy applies
// (ingress certificates' keys come from the leader's API), and the
// versions of the secrets its own instances use (never their values).
// Everything a
// worker writes (its heartbeat and status, build records, events) goes
// through the leader's API, which checks that the certificate's common
// name is the node the write is for; desired state, other nodes' keys,
// assignments, tokens and the CA are out of its reach.
func WorkerGrants(node string) []store.Grant {
	return []store.Grant{
		{Key: NodeAssignmentsPrefix(node), Prefix: true},
		{Key: NodeStatusKey(node)},
		{Key: keyClusterConfig},
		{Key: keyLeaderEndpoint},
		{Key: prefixNetworkNodes, Prefix: true},
		{Key: prefixDNS, Prefix: true},
		{Key: prefixIngressRoutes, Prefix: true},
		{Key: NodeSecretRefsPrefix(node), Prefix: true},
		{Key: prefixIngressChallenges, Prefix: true},
	}
}
