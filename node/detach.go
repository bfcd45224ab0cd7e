package node

// MayDetach reports whether this node may detach from its cluster when it
// loses it (docs/detached.md): only a worker that joined with
// --parent-cluster-name. An etcd member never does: its cluster's quorum
// counts it, and a member that led alone would split the cluster's state
// in two.
func (n *Node) MayDetach() bool {
	return n.state.Role == roleWorker && n.state.ParentClusterName != ""
}
