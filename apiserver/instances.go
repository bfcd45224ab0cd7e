package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
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

// postNodeStatus stores a node's heartbeat. The caller is the node itself
// (its client certificate names it) or holds the admin token.
func (s *Server) postNodeStatus(w http.ResponseWriter, r *http.Request) {
	var st api.NodeStatus
	node, ok := s.readNodeReport(w, r, "node status", 1<<20, &st)
	if !ok {
		return
	}
	if st.NodeName != node {
		writeError(w, badRequest("node status: nodeName %q does not match the URL's node %q", st.NodeName, node))
		return
	}
	if st.Overlay != nil {
		if problems := overlayProblems(st.Overlay.PublicKey, st.Overlay.Port); len(problems) > 0 {
			for i := range problems {
				problems[i].Field = "overlay." + strings.ToLower(problems[i].Field[:1]) + problems[i].Field[1:]
			}
			writeError(w, &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeInvalid,
				Message: "node status: invalid overlay", Details: problems})
			return
		}
	}
	if err := s.recordHeartbeat(r.Context(), st); err != nil {
		writeError(w, errorFor(err))
		return
	}
	if err := s.recordOverlay(r.Context(), st); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// recordOverlay hands a node's reported overlay identity to
// Config.NodeOverlay the first time this server sees it and whenever
// it changes; a failed call is retried with the next report.
func (s *Server) recordOverlay(ctx context.Context, st api.NodeStatus) error {
	if st.Overlay == nil || s.cfg.NodeOverlay == nil {
		return nil
	}
	s.overlaysMu.Lock()
	last, seen := s.overlays[st.NodeName]
	s.overlaysMu.Unlock()
	if seen && last == *st.Overlay {
		return nil
	}
	if err := s.cfg.NodeOverlay(ctx, st.NodeName, *st.Overlay); err != nil {
		return fmt.Errorf("record the overlay of node %s: %w", st.NodeName, err)
	}
	s.overlaysMu.Lock()
	defer s.overlaysMu.Unlock()
	if s.overlays == nil {
		s.overlays = map[string]api.NodeOverlay{}
	}
	s.overlays[st.NodeName] = *st.Overlay
	return nil
}

// recordHeartbeat writes a registered node's heartbeat, and its status when
// that changed (the timestamp aside). The registration is read only when it
// is not known yet or changed since: the write is fenced by its version.
func (s *Server) recordHeartbeat(ctx context.Context, st api.NodeStatus) error {
	node := st.NodeName
	last, known := s.nodes.get(node)
	for attempt := 0; ; attempt++ {
		if !known || attempt > 0 {
			ver, err := s.cfg.Repo.NodeRegistrationVersion(ctx, node)
			if err != nil {
				s.nodes.forget(node)
				return err
			}
			last = reportedNode{regVersion: ver}
		}
		changed := !last.has || !sameStatus(last.status, st)
		ok, err := s.cfg.Repo.RecordHeartbeat(ctx, st, changed, last.regVersion)
		if err != nil {
			s.nodes.forget(node)
			return err
		}
		if ok {
			s.nodes.set(node, reportedNode{regVersion: last.regVersion, status: st, has: true})
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("record the heartbeat of node %s: its registration keeps changing: %w", node, resources.ErrConflict)
		}
		// The registration changed (or went): read it again.
	}
}

// sameStatus reports whether two reports of a node are equal but for their
// timestamps.
func sameStatus(a, b api.NodeStatus) bool {
	a.Timestamp, b.Timestamp = 0, 0
	return reflect.DeepEqual(a, b)
}

// reportedNode is what the server remembers of a node between heartbeats.
type reportedNode struct {
	// regVersion is the version of its registration last read.
	regVersion int64
	// status is the status last written, when has.
	status api.NodeStatus
	has    bool
}

// reportedNodes remembers, per node, its registration's version and the
// status last written, so an unchanged heartbeat writes only its time and
// reads nothing. It starts empty on every leader.
type reportedNodes struct {
	mu sync.Mutex
	m  map[string]reportedNode
}

func (n *reportedNodes) get(node string) (reportedNode, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	r, ok := n.m[node]
	return r, ok
}

func (n *reportedNodes) set(node string, r reportedNode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.m == nil {
		n.m = map[string]reportedNode{}
	}
	n.m[node] = r
}

func (n *reportedNodes) forget(node string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.m, node)
}

// authenticateNode lets a request through with the admin token or with a
// client certificate of the cluster CA whose common name is the {node} of
// the URL.
func (s *Server) authenticateNode(next http.Handler) http.Handler {
	token := s.authenticate(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cn, ok := peerCN(r); ok && !isMetricsCert(r) && cn == chi.URLParam(r, "node") {
			noteActor(r, "node:"+chi.URLParam(r, "node"))
			next.ServeHTTP(w, r)
			return
		}
		token.ServeHTTP(w, r)
	})
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
