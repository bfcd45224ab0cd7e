package apiserver

import (
	"errors"
	"fmt"
	"net/http"

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
// (a hand-back repeated after a lost answer). Every workload is checked
// before any is written.
func (s *Server) postHandBack(w http.ResponseWriter, r *http.Request) {
	var hb api.HandBack
	node, ok := s.readNodeReport(w, r, "hand-back", maxHandBackBytes, &hb)
	if !ok {
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
		qs = append(qs, q)
	}
	var out api.HandBackResult
	for _, q := range qs {
		key := q.Namespace() + "/" + q.Name()
		if _, err := s.cfg.Repo.EnsureNamespace(r.Context(), q.Namespace(), nil); err != nil {
			writeError(w, errorFor(err))
			return
		}
		_, err := s.cfg.Repo.ApplyWorkload(r.Context(), resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner(), CreateOnly: true})
		switch {
		case err == nil:
			out.Accepted = append(out.Accepted, key)
			s.recordEvent(r.Context(), api.WorkloadRef(q.Namespace(), q.Name(), ""), api.EventNormal, "HandedBack",
				fmt.Sprintf("created on node %s while it was detached, handed back as it rejoined", node))
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
	s.cfg.Logger.Info().Str("node", node).Strs("accepted", out.Accepted).Int("conflicts", len(out.Conflicts)).Msg("node handed back its workloads")
	writeJSON(w, http.StatusOK, out)
}
