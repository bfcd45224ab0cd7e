package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// workloadView is w as the API returns it: with a Pending status while the
// leader's status pass has not derived one yet (it does within moments of an
// apply), and its conditions a list, never null.
func workloadView(w api.Workload) api.Workload {
	if w.Status.Phase == "" {
		w.Status.Phase = api.PhasePending
		w.Status.Conditions = []api.Condition{{Type: "Ready", Status: api.ConditionFalse, Reason: api.PhasePending,
			Message: "waiting for the leader to derive the status", LastTransitionTime: w.UpdatedAt}}
	}
	if w.Status.Conditions == nil {
		w.Status.Conditions = []api.Condition{}
	}
	return w
}

func workloadViews(ws []api.Workload) []api.Workload {
	out := make([]api.Workload, 0, len(ws))
	for _, w := range ws {
		out = append(out, workloadView(w))
	}
	return out
}

func (s *Server) listAllWorkloads(w http.ResponseWriter, r *http.Request) {
	ws, err := s.cfg.Repo.ListWorkloads(r.Context(), "")
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSONList(w, http.StatusOK, ws, workloadView)
}

func (s *Server) listWorkloads(w http.ResponseWriter, r *http.Request) {
	ns, ok := s.namespaceParam(w, r)
	if !ok {
		return
	}
	if _, err := s.cfg.Repo.GetNamespace(r.Context(), ns); err != nil {
		writeError(w, errorFor(err))
		return
	}
	ws, err := s.cfg.Repo.ListWorkloads(r.Context(), ns)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSONList(w, http.StatusOK, ws, workloadView)
}

func (s *Server) getWorkload(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, workloadView(*wl))
}

func (s *Server) getWorkloadFile(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	b, err := s.cfg.Repo.GetManifest(r.Context(), ns, name, chi.URLParam(r, "file"))
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

func (s *Server) createWorkload(w http.ResponseWriter, r *http.Request) {
	s.applyWorkload(w, r, "", true)
}

// upsertWorkload is PUT on the collection: create or update, the name coming
// from workload.kat.
func (s *Server) upsertWorkload(w http.ResponseWriter, r *http.Request) {
	s.applyWorkload(w, r, "", false)
}

func (s *Server) putWorkload(w http.ResponseWriter, r *http.Request) {
	s.applyWorkload(w, r, chi.URLParam(r, "name"), false)
}

// applyWorkload handles POST (create only) and PUT (create or update) of a
// tar.gz Quadlet directory. Everything is checked before anything is written.
func (s *Server) applyWorkload(w http.ResponseWriter, r *http.Request, urlName string, createOnly bool) {
	ns, ok := s.namespaceParam(w, r)
	if !ok {
		return
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	body, apiErr := readBody(w, r, s.cfg.MaxArchiveBytes, archiveBody)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	files, err := quadlet.ReadArchive(bytes.NewReader(body), quadlet.DefaultLimits)
	if err != nil {
		if errors.Is(err, quadlet.ErrTooLarge) {
			writeError(w, &api.Error{StatusCode: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: err.Error()})
			return
		}
		writeError(w, badRequest("invalid workload archive: %v", err))
		return
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: ns})
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	noteName(r, q.Name())
	if q.Namespace() != ns {
		writeError(w, invalidQuadlet(quadlet.ErrorList{{File: quadlet.WorkloadFile, Field: "metadata.namespace",
			Message: fmt.Sprintf("names namespace %q but the request is for namespace %q", q.Namespace(), ns)}}))
		return
	}
	if urlName != "" && q.Name() != urlName {
		writeError(w, invalidQuadlet(quadlet.ErrorList{{File: quadlet.WorkloadFile, Field: "metadata.name",
			Message: fmt.Sprintf("names workload %q but the request is for %q", q.Name(), urlName)}}))
		return
	}
	if q, err = s.pinIfDetached(r.Context(), q); err != nil {
		writeError(w, errorFor(err))
		return
	}
	res, err := s.cfg.Repo.ApplyWorkload(r.Context(), resources.ApplyRequest{
		Quadlet: q, Owner: api.APIOwner(), Force: force, CreateOnly: createOnly,
	})
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	wl, err := s.cfg.Repo.GetWorkload(r.Context(), ns, q.Name())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	if res.Changed {
		reason, verb := "Updated", "updated"
		if res.Created {
			reason, verb = "Created", "created"
		}
		s.recordEvent(r.Context(), api.WorkloadRef(ns, wl.Name, wl.UID), api.EventNormal, reason,
			fmt.Sprintf("%s through the API at generation %d (spec %s)", verb, wl.Generation, shortHash(wl.SpecHash)))
	}
	out := workloadView(*wl)
	if wl.Status.Phase == "" || res.Changed {
		// The leader derives the status moments later; until then the
		// answer shows what was asked for.
		out.Status.Desired = resources.DesiredInstances(q)
	}
	writeJSON(w, status, api.ApplyResult{Workload: out, Created: res.Created, Changed: res.Changed})
}

func (s *Server) deleteWorkload(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	meta, err := s.cfg.Repo.DeleteWorkload(r.Context(), resources.DeleteRequest{
		Namespace: ns, Name: name, Owner: api.APIOwner(), Force: force,
	})
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.recordEvent(r.Context(), api.WorkloadRef(ns, name, meta.UID), api.EventNormal, "Deleted",
		fmt.Sprintf("deleted through the API at generation %d", meta.Generation))
	writeJSON(w, http.StatusOK, workloadView(api.Workload{WorkloadMeta: *meta}))
}

func (s *Server) namespaceParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	ns := chi.URLParam(r, "ns")
	if !quadlet.IsDNSLabel(ns) {
		writeError(w, badRequest("invalid namespace %q in the URL: must be a DNS label (lowercase letters, digits and '-', at most 63)", ns))
		return "", false
	}
	return ns, true
}

func (s *Server) workloadParams(w http.ResponseWriter, r *http.Request) (ns, name string, ok bool) {
	ns, ok = s.namespaceParam(w, r)
	if !ok {
		return "", "", false
	}
	name = chi.URLParam(r, "name")
	if !quadlet.IsDNSLabel(name) {
		writeError(w, badRequest("invalid workload name %q in the URL: must be a DNS label", name))
		return "", "", false
	}
	return ns, name, true
}

func boolQuery(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %q: %q is not true or false", key, v)
	}
	return b, nil
}

// shortHash is the first 12 digits of a spec hash, as status shows it.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// pinIfDetached returns q pinned to the node when the cluster is a detached
// node (docs/detached.md): its spec.nodeSelector gets
// kat.dws.rip/nodeName: NODE, written into workload.kat so that get shows
// it. A workload that selects another node is refused: it could run
// nowhere.
func (s *Server) pinIfDetached(ctx context.Context, q *quadlet.Quadlet) (*quadlet.Quadlet, error) {
	d, err := s.cfg.Repo.GetDetached(ctx)
	if err != nil || d == nil {
		return q, err
	}
	switch v, ok := q.Workload.Spec.NodeSelector[resources.NodeNameLabel]; {
	case ok && v == d.Node:
		return q, nil
	case ok:
		return nil, invalidQuadlet(quadlet.ErrorList{{File: quadlet.WorkloadFile, Field: "spec.nodeSelector[\"" + resources.NodeNameLabel + "\"]",
			Message: fmt.Sprintf("selects node %q, but this is node %s, detached from cluster %s: a workload applied to it runs on it only", v, d.Node, d.ParentCluster)}})
	}
	files, err := quadlet.WithNodeSelector(q.Files, resources.NodeNameLabel, d.Node)
	if err != nil {
		return nil, fmt.Errorf("pin the workload to the detached node: %w", err)
	}
	return quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: q.Namespace()})
}
