package resources

import (
	"strconv"
	"strings"
)

// Key prefixes of the etcd schema (docs/architecture.md "etcd keys").
const (
	keySchemaVersion   = "/kat/schema_version"
	keyClusterUID      = "/kat/config/cluster_uid"
	keyClusterConfig   = "/kat/config/cluster"
	keyLeaderEndpoint  = "/kat/config/leader_endpoint"
	keyDetached        = "/kat/config/detached"
	keyAdminTokenHash  = "/kat/config/admin_token_sha256"
	keyJoinTokenHash   = "/kat/config/join_token_sha256"
	keyJoinTokenSealed = "/kat/config/join_token_sealed"
	prefixNamespaces   = "/kat/namespaces/"
	prefixDesired      = "/kat/workloads/desired/"
	prefixArchive      = "/kat/workloads/archive/"
	prefixStatus       = "/kat/workloads/status/"
	prefixRegistration = "/kat/nodes/registration/"
	prefixNodeStatus   = "/kat/nodes/status/"
	prefixHeartbeat    = "/kat/nodes/heartbeat/"
	prefixNodeUsage    = "/kat/nodes/usage/"
)

// SchemaVersion is the value of /kat/schema_version written at init.
const SchemaVersion = "v1.0"

// NamespaceKey is where a namespace record lives.
func NamespaceKey(name string) string { return prefixNamespaces + name }

// DesiredPrefix is the prefix of all desired state of one workload.
func DesiredPrefix(ns, name string) string { return prefixDesired + ns + "/" + name + "/" }

// ManifestKey is where one Quadlet file of a workload lives.
func ManifestKey(ns, name, file string) string { return DesiredPrefix(ns, name) + "manifest/" + file }

// MetaKey is where a workload's metadata (generation, spec hash, owner) lives.
func MetaKey(ns, name string) string { return DesiredPrefix(ns, name) + "meta" }

// StatusKey is where the leader keeps a workload's status.
func StatusKey(ns, name string) string { return prefixStatus + ns + "/" + name }

// ArchivePrefix is the prefix of every archived generation of a workload.
func ArchivePrefix(ns, name string) string { return prefixArchive + ns + "/" + name + "/" }

// ArchiveGenerationPrefix is the prefix of one archived generation.
func ArchiveGenerationPrefix(ns, name string, gen int64) string {
	return ArchivePrefix(ns, name) + strconv.FormatInt(gen, 10) + "/"
}

// NodeRegistrationKey is where a node's static registration lives.
func NodeRegistrationKey(node string) string { return prefixRegistration + node }

// NodeStatusKey is where a node's last reported status lives.
func NodeStatusKey(node string) string { return prefixNodeStatus + node }

// splitDesiredMeta returns namespace and name when key is a workload meta key.
func splitDesiredMeta(key string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(key, prefixDesired)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[2] != "meta" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// Key prefixes of Git sources and events (docs/architecture.md "etcd keys").
const (
	prefixSources = "/kat/sources/"
	prefixEvents  = "/kat/events/"
)

// SourceSpecKey is where a Git source's spec lives.
func SourceSpecKey(name string) string { return prefixSources + name + "/spec" }

// SourceStatusKey is where a Git source's status lives.
func SourceStatusKey(name string) string { return prefixSources + name + "/status" }

// SourcesPrefix is the prefix of every Git source's records.
func SourcesPrefix() string { return prefixSources }

// Key prefix of the assignments: one key per instance, under its node.
const prefixAssignments = "/kat/assignments/"

// AssignmentsPrefix is the prefix of every assignment.
func AssignmentsPrefix() string { return prefixAssignments }

// NodeAssignmentsPrefix is the prefix of one node's assignments, the key an
// agent watches.
func NodeAssignmentsPrefix(node string) string { return prefixAssignments + node + "/" }

// AssignmentKey is where one instance's assignment lives.
func AssignmentKey(node, instanceID string) string { return NodeAssignmentsPrefix(node) + instanceID }

// DesiredRootPrefix is the prefix of every workload's desired state, the key
// the leader's assignment loop watches.
func DesiredRootPrefix() string { return prefixDesired }

// ParseDesiredKey splits a key under DesiredRootPrefix: the workload's
// namespace and name, and the manifest file it holds ("" for the meta key).
// ok is false for any other key.
func ParseDesiredKey(key string) (ns, name, file string, ok bool) {
	rest, found := strings.CutPrefix(key, prefixDesired)
	if !found {
		return "", "", "", false
	}
	parts := strings.SplitN(rest, "/", 4)
	switch {
	case len(parts) == 3 && parts[2] == "meta":
		return parts[0], parts[1], "", true
	case len(parts) == 4 && parts[2] == "manifest" && parts[3] != "":
		return parts[0], parts[1], parts[3], true
	}
	return "", "", "", false
}

// StatusPrefix is the prefix of every workload's status, written by the
// leader's status loop only.
func StatusPrefix() string { return prefixStatus }

// NodeHeartbeatKey is where a node's last heartbeat time lives: written on
// every beat, apart from its status, which is written only when it changes.
func NodeHeartbeatKey(node string) string { return prefixHeartbeat + node }

// NodeUsageKey is where a node's last usage sample lives
// (api.NodeStatus.Usage): written with its heartbeat, watched by no loop.
func NodeUsageKey(node string) string { return prefixNodeUsage + node }

// NodeHeartbeatPrefix is the prefix of every node's last heartbeat time.
func NodeHeartbeatPrefix() string { return prefixHeartbeat }

// NodeRegistrationPrefix is the prefix of every node's registration.
func NodeRegistrationPrefix() string { return prefixRegistration }

// NodeStatusPrefix is the prefix of every node's reported status.
func NodeStatusPrefix() string { return prefixNodeStatus }

// BuildsPrefix is the prefix of every build record.
func BuildsPrefix() string { return prefixBuilds }
