package apiserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// workloadInstances joins a workload's assignments with the reports of the
// nodes that hold them.
func (s *Server) workloadInstances(ctx context.Context, ns, name string) ([]api.Instance, error) {
	as, reported, err := s.assignedInstances(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	out := make([]api.Instance, 0, len(as))
	for _, a := range as {
		in := api.Instance{Assignment: a, Status: api.InstanceStatus{Phase: api.InstancePending, HealthStatus: api.HealthPending}}
		if r, ok := reported[a.InstanceID]; ok {
			in.Status = r
			in.Ready = r.Ready() && !a.Leaving()
		}
		out = append(out, in)
	}
	return out, nil
}

// assignedInstances returns a workload's assignments, without their files
// (GET .../workloads/{name}/files/{file} serves the generation's), and
// what the nodes holding them last reported of their instances: from the
// watch-fed copy (Config.WorkloadInstances) when it is ready, else from
// etcd.
func (s *Server) assignedInstances(ctx context.Context, ns, name string) ([]api.Assignment, map[string]api.InstanceStatus, error) {
	if s.cfg.WorkloadInstances != nil {
		if as, reported, ok := s.cfg.WorkloadInstances(ns, name); ok {
			return as, reported, nil
		}
	}
	as, err := s.cfg.Repo.ListWorkloadAssignments(ctx, ns, name)
	if err != nil {
		return nil, nil, err
	}
	reported, err := s.instanceReports(ctx, as)
	return as, reported, err
}

// instanceReports returns what the nodes holding as last reported of their
// instances, by instance ID; a node that has not reported adds nothing.
func (s *Server) instanceReports(ctx context.Context, as []api.Assignment) (map[string]api.InstanceStatus, error) {
	var nodes []string
	for _, a := range as {
		nodes = append(nodes, a.Node)
	}
	slices.Sort(nodes)
	reported := map[string]api.InstanceStatus{}
	for _, node := range slices.Compact(nodes) {
		st, err := s.cfg.Repo.GetNodeStatus(ctx, node)
		if errors.Is(err, resources.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, is := range st.WorkloadInstances {
			reported[is.InstanceID] = is
		}
	}
	return reported, nil
}

func (s *Server) getWorkloadStatus(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	ins, err := s.workloadInstances(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	builds, err := s.workloadBuilds(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	d := api.WorkloadDetail{Workload: workloadView(*wl), Instances: ins, Builds: builds}
	ro, err := s.cfg.Repo.GetDaemonRollout(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if ro != nil {
		d.DaemonRollout = &ro.DaemonRollout
	}
	writeJSON(w, http.StatusOK, d)
}

// copyFlushing copies src to w, flushing after every read so followed logs
// arrive as they are written.
func copyFlushing(w http.ResponseWriter, src io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			_ = rc.Flush()
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
