package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"

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

// workloadLogs proxies an instance's logs from the agent that runs it, or
// with ?build=true the log of a build (buildLog).
func (s *Server) workloadLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	follow, err := boolQuery(r, "follow")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	if isBuild, err := boolQuery(r, "build"); err != nil {
		writeError(w, badRequest("%v", err))
		return
	} else if isBuild {
		s.buildLog(w, r, ns, name)
		return
	}
	ctx := r.Context()
	if _, err := s.cfg.Repo.GetWorkload(ctx, ns, name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	ins, err := s.workloadInstances(ctx, ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	want := r.URL.Query().Get("instance")
	i := slices.IndexFunc(ins, func(in api.Instance) bool { return want == "" || in.InstanceID == want })
	if i < 0 {
		msg := fmt.Sprintf("workload %s/%s has no instances yet", ns, name)
		if want != "" {
			msg = fmt.Sprintf("workload %s/%s has no instance %q", ns, name, want)
		}
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: msg})
		return
	}
	if s.cfg.AgentTransport == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal, Message: "this server cannot reach agents"})
		return
	}
	reg, err := s.cfg.Repo.GetNodeRegistration(ctx, ins[i].Node)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	u := url.URL{Scheme: "https", Host: net.JoinHostPort(reg.AdvertiseAddress, strconv.Itoa(reg.AgentPort)),
		Path: "/v1alpha1/instances/" + url.PathEscape(ins[i].InstanceID) + "/logs", RawQuery: url.Values{"follow": {strconv.FormatBool(follow)}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	resp, err := (&http.Client{Transport: s.cfg.AgentTransport}).Do(req)
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
			Message: fmt.Sprintf("reach the agent of node %s: %v", ins[i].Node, err)})
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set(api.HeaderInstance, ins[i].InstanceID)
	w.WriteHeader(resp.StatusCode)
	_ = copyFlushing(w, resp.Body)
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
