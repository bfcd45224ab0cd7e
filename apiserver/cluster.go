package apiserver

import (
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func (s *Server) clusterView(ctx context.Context) (*api.ClusterConfig, error) {
	info, err := s.cfg.Repo.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	return &api.ClusterConfig{ClusterIdentity: info.ClusterIdentity, Spec: info.Config.Spec}, nil
}

func (s *Server) clusterConfig(w http.ResponseWriter, r *http.Request) {
	cv, err := s.clusterView(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, cv)
}

// clusterServers answers the API URLs of the etcd members, the leader's
// first: what katcall refreshes its list of servers from.
func (s *Server) clusterServers(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.cfg.Repo.ListNodes(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	out := api.ClusterServers{Servers: []string{}}
	if l, err := s.leader(r.Context()); err == nil && l.APIURL != "" {
		out.Leader = l.APIURL
		out.Servers = append(out.Servers, l.APIURL)
	} else if err != nil && !errors.Is(err, resources.ErrNotFound) {
		writeError(w, errorFor(err))
		return
	}
	for _, n := range nodes {
		u := n.Registration.APIURL()
		if n.Registration.EtcdMember && u != "" && !slices.Contains(out.Servers, u) {
			out.Servers = append(out.Servers, u)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) leader(ctx context.Context) (*api.Leader, error) {
	if s.cfg.Leader != nil {
		return s.cfg.Leader(ctx)
	}
	return s.cfg.Repo.GetLeaderEndpoint(ctx)
}

func (s *Server) nodeViews(ctx context.Context) ([]api.Node, error) {
	nodes, err := s.cfg.Repo.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	leader, err := s.leader(ctx)
	if err != nil && !errors.Is(err, resources.ErrNotFound) {
		return nil, err
	}
	as, err := s.cfg.Repo.ListAssignmentsWithoutFiles(ctx, "")
	if err != nil {
		return nil, err
	}
	byNode := map[string][]api.Assignment{}
	for _, a := range as {
		byNode[a.Node] = append(byNode[a.Node], a)
	}
	now := s.cfg.Now()
	out := make([]api.Node, 0, len(nodes))
	for _, n := range nodes {
		reg := n.Registration
		v := api.Node{NodeRegistration: reg, Status: api.NodeUnknown, Leader: leader != nil && leader.Node == reg.Name}
		reported := map[string]string{}
		if n.Status != nil {
			v.NodeStatus = *n.Status
			v.WorkloadInstances = nil
			for _, is := range n.Status.WorkloadInstances {
				reported[is.InstanceID] = is.Phase
			}
		}
		p := placedOn(byNode[reg.Name], reported)
		v.Instances, v.Requested, v.Active = p.instances, p.requested, p.active
		if !n.Heartbeat.IsZero() {
			hb := n.Heartbeat
			ageSec := int64(max(now.Sub(hb), 0).Seconds())
			v.LastHeartbeat, v.HeartbeatAgeSeconds = &hb, &ageSec
			v.Status = api.NodeNotReady
			if resources.HeartbeatFresh(resources.HeartbeatInTerm(hb, s.cfg.TermStart), now, s.cfg.NodeLossTimeout) && !n.Departed() {
				v.Status = api.NodeReady
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	out, err := s.nodeViews(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.nodeView(r.Context(), chi.URLParam(r, "node"))
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	cv, err := s.clusterView(ctx)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	st := api.Status{Cluster: *cv, Phases: map[string]int{}}
	if l, err := s.leader(ctx); err == nil {
		st.Leader = l
	} else if !errors.Is(err, resources.ErrNotFound) {
		writeError(w, errorFor(err))
		return
	}
	if st.Nodes, err = s.nodeViews(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	if st.Namespaces, err = s.namespaceViews(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	ws, err := s.cfg.Repo.ListWorkloads(ctx, "")
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	st.Workloads = workloadViews(ws)
	for _, wl := range st.Workloads {
		st.Phases[wl.Status.Phase]++
	}
	if st.Sources, err = s.cfg.Repo.ListSources(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	if st.Backup, err = s.cfg.Repo.BackupStatus(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	if st.Detached, err = s.cfg.Repo.GetDetached(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}
