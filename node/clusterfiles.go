package node

import (
	"fmt"
	"os"

	"kat.dws.rip/kat/quadlet"
)

// missingClusterFiles lists the files cluster.kat's spec.gitops names that
// this machine cannot read, each as "FIELD PATH: why". The leader reads
// them, so every etcd member, which may lead, needs them at the same paths.
func missingClusterFiles(spec quadlet.ClusterSpec) []string {
	g := spec.GitOps
	if g == nil {
		return nil
	}
	var out []string
	for _, f := range g.Files() {
		if fh, err := os.Open(f.Path); err != nil {
			out = append(out, fmt.Sprintf("spec.gitops.%s %s: %v", f.Field, f.Path, err))
		} else {
			fh.Close()
		}
	}
	return out
}

// warnMissingClusterFiles logs each file missingClusterFiles finds, saying
// what fails while this node leads (when) without it.
func (n *Node) warnMissingClusterFiles(when string) {
	for _, m := range missingClusterFiles(n.state.Cluster.Spec) {
		n.log.Warn().Str("file", m).Msgf("cluster.kat names a file this node cannot read %s: copy it to every etcd member at the same path (webhooks, or syncs of the config repo, fail while a node without it leads)", when)
	}
}
