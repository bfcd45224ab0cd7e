package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// maxHandBackBytes bounds a hand-back: a detached node's local workloads.
const maxHandBackBytes = 8 << 20

// postHandBack takes the workloads a detached node created while it was
// away (docs/detached.md). Each must select the node by
// kat.dws.rip/nodeName; it is applied as a new API-owned workload, and one
// whose name the cluster uses already is reported as a conflict, never
// overwritten, unless the cluster's is exactly what the node hands back
// (a hand-back repeated after a lost answer). The instances the node runs
// of a new workload are recorded as its assignments in the same write, so
// the node keeps their containers; should the cluster have given out one's
// address or user-namespace slot meanwhile, the workload is applied without
// them (NotAdopted) and the leader places new ones. Every workload is
// checked before any is written.
func (s *Server) postHandBack(w http.ResponseWriter, r *http.Request) {
	var hb api.HandBack
	node, ok := s.readNodeReport(w, r, "hand-back", maxHandBackBytes, &hb)
	if !ok {
		return
	}
	subnet, apiErr := s.nodeSubnet(r.Context(), node)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	qs := make([]*quadlet.Quadlet, 0, len(hb.Workloads))
	for i, wl := range hb.Workloads {
		q, err := quadlet.ParseWorkload(wl.Files, quadlet.ParseOptions{DefaultNamespace: wl.Namespace})
		if err != nil {
			writeError(w, badRequest("hand-back: workloads[%d] (%s/%s): %v", i, wl.Namespace, wl.Name, err))
			return
		}
		if q.Namespace() != wl.Namespace || q.Name() != wl.Name {
			writeError(w, badRequest("hand-back: workloads[%d]: names %s/%s, its files %s/%s", i, wl.Namespace, wl.Name, q.Namespace(), q.Name()))
			return
		}
		if v := q.Workload.Spec.NodeSelector[resources.NodeNameLabel]; v != node {
			writeError(w, badRequest("hand-back: workloads[%d] (%s/%s): spec.nodeSelector[%q] is %q: a node hands back only workloads pinned to it (%s)",
				i, wl.Namespace, wl.Name, resources.NodeNameLabel, v, node))
			return
		}
		if msg := handBackInstanceProblem(node, subnet, q, wl.Instances); msg != "" {
			writeError(w, badRequest("hand-back: workloads[%d] (%s/%s): %s", i, wl.Namespace, wl.Name, msg))
			return
		}
		qs = append(qs, q)
	}
	var out api.HandBackResult
	for i, q := range qs {
		key := q.Namespace() + "/" + q.Name()
		if _, err := s.cfg.Repo.EnsureNamespace(r.Context(), q.Namespace(), nil); err != nil {
			writeError(w, errorFor(err))
			return
		}
		req := resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner(), CreateOnly: true, Adopt: hb.Workloads[i].Instances}
		_, err := s.cfg.Repo.ApplyWorkload(r.Context(), req)
		if errors.Is(err, resources.ErrAddressTaken) || errors.Is(err, resources.ErrSlotTaken) {
			if out.NotAdopted == nil {
				out.NotAdopted = map[string]string{}
			}
			out.NotAdopted[key] = err.Error()
			s.recordEvent(r.Context(), api.WorkloadRef(q.Namespace(), q.Name(), ""), api.EventWarning, "HandBackNotAdopted",
				fmt.Sprintf("node %s's instances are replaced by new ones: %v", node, err))
			req.Adopt = nil
			_, err = s.cfg.Repo.ApplyWorkload(r.Context(), req)
		}
		switch {
		case err == nil:
			out.Accepted = append(out.Accepted, key)
			s.recordEvent(r.Context(), api.WorkloadRef(q.Namespace(), q.Name(), ""), api.EventNormal, "HandedBack",
				fmt.Sprintf("created on node %s while it was detached, handed back as it rejoined with %d running instance(s)", node, len(req.Adopt)))
		case errors.Is(err, resources.ErrAlreadyExists):
			if cur, gerr := s.cfg.Repo.GetWorkload(r.Context(), q.Namespace(), q.Name()); gerr == nil && cur.SpecHash == q.SpecHash() {
				out.Accepted = append(out.Accepted, key)
				continue
			}
			reason := fmt.Sprintf("the cluster has a workload %s already: node %s's is not applied; apply it under another name, or delete one of them", key, node)
			out.Conflicts = append(out.Conflicts, api.HandBackConflict{Workload: key, Reason: reason})
			s.recordEvent(r.Context(), api.WorkloadRef(q.Namespace(), q.Name(), ""), api.EventWarning, "HandBackConflict", reason)
		default:
			writeError(w, errorFor(err))
			return
		}
	}
	s.cfg.Logger.Info().Str("node", node).Strs("accepted", out.Accepted).Int("conflicts", len(out.Conflicts)).
		Int("not_adopted", len(out.NotAdopted)).Msg("node handed back its workloads")
	writeJSON(w, http.StatusOK, out)
}

// nodeSubnet is the overlay subnet of node, invalid when it has none.
func (s *Server) nodeSubnet(ctx context.Context, node string) (netip.Prefix, *api.Error) {
	nw, err := s.cfg.Repo.GetNodeNetwork(ctx, node)
	switch {
	case errors.Is(err, resources.ErrNotFound):
		return netip.Prefix{}, nil
	case err != nil:
		return netip.Prefix{}, errorFor(err)
	}
	return nw.Subnet, nil
}

// handBackInstanceProblem says what is wrong with the instances node hands
// back of workload q ("" when nothing is): each is on node, of q, in
// service, named by a DNS label used once, with a user-namespace slot and
// an address of node's subnet (none when node has no subnet).
func handBackInstanceProblem(node string, subnet netip.Prefix, q *quadlet.Quadlet, as []api.Assignment) string {
	seen := map[string]bool{}
	for j, a := range as {
		switch {
		case a.Node != node:
			return fmt.Sprintf("instances[%d].node is %q: a node hands back only its own instances (%s)", j, a.Node, node)
		case a.Namespace != q.Namespace() || a.Workload != q.Name():
			return fmt.Sprintf("instances[%d] is of %s/%s", j, a.Namespace, a.Workload)
		case a.Type != q.Workload.Spec.Type:
			return fmt.Sprintf("instances[%d].type is %q, the workload's %q", j, a.Type, q.Workload.Spec.Type)
		case !quadlet.IsDNSLabel(a.InstanceID) || seen[a.InstanceID]:
			return fmt.Sprintf("instances[%d].instanceID %q: must be a DNS label, once", j, a.InstanceID)
		case a.Leaving():
			return fmt.Sprintf("instances[%d] (%s) is out of service (leavingAt set)", j, a.InstanceID)
		case a.UserNSSlot == nil || *a.UserNSSlot < 0:
			return fmt.Sprintf("instances[%d] (%s): userNSSlot missing or negative", j, a.InstanceID)
		case a.IP.IsValid() && !subnet.Contains(a.IP):
			return fmt.Sprintf("instances[%d] (%s): ip %s is outside node %s's subnet %s", j, a.InstanceID, a.IP, node, subnet)
		}
		seen[a.InstanceID] = true
	}
	return ""
}
