package agent

import (
	"context"

	"kat.dws.rip/kat/runtime"
)

// ownership is whose a container is, as one agent sees it.
type ownership int

const (
	// ownedHere: this cluster's container on this node; the agent
	// manages it (adopts, restarts, removes).
	ownedHere ownership = iota
	// notManaged: no LabelManaged, a container KAT did not make.
	notManaged
	// otherNode: another node's (nodes of test clusters share a host).
	otherNode
	// otherCluster: this node's name, another cluster's UID: a second
	// cluster on this host, or the cluster this node belonged to before it
	// was initialised again.
	otherCluster
	// unlabelled: this node's name and no LabelCluster: made before
	// containers carried it, or by hand.
	unlabelled
)

// ownershipOf tells whose a container with labels is for the agent of node
// in cluster. It is pure.
func ownershipOf(labels map[string]string, cluster, node string) ownership {
	switch {
	case labels[runtime.LabelManaged] != "true":
		return notManaged
	case labels[runtime.LabelNode] != node:
		return otherNode
	case labels[runtime.LabelCluster] == "":
		return unlabelled
	case labels[runtime.LabelCluster] != cluster:
		return otherCluster
	}
	return ownedHere
}

// labels are the labels that select the agent's own containers, in
// listings and in the event stream.
func (ag *Agent) labels() map[string]string {
	return map[string]string{runtime.LabelNode: ag.cfg.Node, runtime.LabelCluster: ag.cfg.ClusterUID}
}

// ownedOnly drops from cs every container that is not the agent's own, so a
// runtime that ignored the listing's label filter still cannot hand the
// agent another cluster's container, and those it is to leave alone
// (AgentConfig.Leave).
func (ag *Agent) ownedOnly(cs []runtime.ContainerStatus) []runtime.ContainerStatus {
	kept := cs[:0:0]
	for _, c := range cs {
		if ag.cfg.Leave != nil && ag.cfg.Leave(c.Labels[runtime.LabelInstance]) {
			continue
		}
		if ownershipOf(c.Labels, ag.cfg.ClusterUID, ag.cfg.Node) == ownedHere {
			kept = append(kept, c)
		}
	}
	return kept
}

// reportLeftAlone logs, once per container when the agent starts, each
// container that carries this node's name but not this cluster's UID, and
// why the agent leaves it alone: such a container is never adopted, stopped
// or removed, so only an operator can remove it (podman rm -f ID).
func (ag *Agent) reportLeftAlone(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	cs, err := ag.cfg.Runtime.ListManagedContainers(lctx, map[string]string{runtime.LabelNode: ag.cfg.Node})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			ag.cfg.Logger.Debug().Err(err).Msg("cannot list this node's containers of other clusters; the next start tells")
		}
		return
	}
	for _, c := range cs {
		own := ownershipOf(c.Labels, ag.cfg.ClusterUID, ag.cfg.Node)
		if own != otherCluster && own != unlabelled {
			continue
		}
		ev := ag.cfg.Logger.Info()
		msg := "container of another cluster with this node's name: left alone"
		if own == unlabelled {
			ev = ag.cfg.Logger.Warn()
			msg = "container without a cluster label (made before containers carried one, or by hand): left alone; " +
				"remove it by hand (podman rm -f) if nothing needs it"
		}
		ev.Str("container_id", c.ID).Str("container", c.Name).Str("instance", c.Labels[runtime.LabelInstance]).
			Str("cluster_uid", c.Labels[runtime.LabelCluster]).Msg(msg)
	}
}
