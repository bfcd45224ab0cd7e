package apiserver

import (
	"context"
	"errors"
	"io"
	"net/http"

	"kat.dws.rip/kat/api"
)

// workloadInstances joins a workload's assignments with the agents' reports.
func (s *Server) workloadInstances(ctx context.Context, ns, name string) ([]api.Instance, error) {
	as, err := s.cfg.Repo.ListAssignments(ctx, "")
	if err != nil {
		return nil, err
	}
	sts, err := s.cfg.Repo.ListNodeStatuses(ctx)
	if err != nil {
		return nil, err
	}
	reported := map[string]api.InstanceStatus{}
	for _, n := range sts {
		for _, is := range n.WorkloadInstances {
			reported[is.InstanceID] = is
		}
	}
	out := []api.Instance{}
	for _, a := range as {
		if a.Namespace != ns || a.Workload != name {
			continue
		}
		a.Files = nil // the generation's: GET .../workloads/{name}/files/{file} serves them
		in := api.Instance{Assignment: a, Status: api.InstanceStatus{Phase: api.InstancePending, HealthStatus: api.HealthPending}}
		if r, ok := reported[a.InstanceID]; ok {
			in.Status = r
			in.Ready = r.Ready() && !a.Leaving()
		}
		out = append(out, in)
	}
	return out, nil
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
