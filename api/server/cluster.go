package server

import (
	"context"
	"errors"
	"net/http"

	"kat.dws.rip/kat/api"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/store/resources"
)

func (s *Server) clusterView(ctx context.Context) (*api.ClusterConfig, error) {
	info, err := s.cfg.Repo.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	return &api.ClusterConfig{UID: info.UID, Name: info.Config.Metadata.Name, CreatedAt: info.CreatedAt, Spec: info.Config.Spec}, nil
}

func (s *Server) clusterConfig(w http.ResponseWriter, r *http.Request) {
	cv, err := s.clusterView(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, cv)
}

func (s *Server) leader(ctx context.Context) (*api.Leader, error) {
	if s.cfg.Leader != nil {
		return s.cfg.Leader(ctx)
	}
	ep, err := s.cfg.Repo.GetLeaderEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	return &api.Leader{Node: ep.Node, APIURL: ep.APIURL, Since: ep.Since}, nil
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
	now := s.cfg.Now()
	out := make([]api.Node, 0, len(nodes))
	for _, n := range nodes {
		reg := n.Registration
		v := api.Node{
			Name: reg.Name, UID: reg.UID, Status: api.NodeUnknown, AdvertiseAddress: reg.AdvertiseAddress,
			APIPort: reg.APIPort, AgentPort: reg.AgentPort, Labels: reg.Labels, JoinedAt: reg.JoinedAt,
			Leader: leader != nil && leader.Node == reg.Name,
		}
		if n.Status != nil {
			v.Resources = n.Status.Resources
			v.Conditions, v.Instances = n.Status.Conditions, len(n.Status.WorkloadInstances)
		}
		if !n.Heartbeat.IsZero() {
			hb := n.Heartbeat
			v.LastHeartbeat = &hb
			v.Status = api.NodeNotReady
			if n.Ready(now, s.cfg.NodeLossTimeout) {
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
	name := chi.URLParam(r, "node")
	out, err := s.nodeViews(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	for _, n := range out {
		if n.Name == name {
			writeJSON(w, http.StatusOK, n)
			return
		}
	}
	writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "node " + name + " not found"})
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
	st.Workloads = toAPIWorkloads(ws)
	for _, wl := range st.Workloads {
		st.Phases[wl.Status.Phase]++
	}
	if st.Sources, err = s.cfg.Repo.ListSources(ctx); err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}
