package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"kat.dws.rip/kat/api"
)

var commitQueryRE = regexp.MustCompile(`^[0-9a-f]{7,40}$`)

// workloadBuilds returns the build records of workload ns/name, newest
// first; records that do not decode are skipped.
func (s *Server) workloadBuilds(ctx context.Context, ns, name string) ([]api.Build, error) {
	kvs, err := s.cfg.Repo.ListBuildRecordsJSON(ctx, ns, name, "")
	if err != nil {
		return nil, err
	}
	out := make([]api.Build, 0, len(kvs))
	for _, kv := range kvs {
		var b api.Build
		if json.Unmarshal(kv.Value, &b) == nil {
			out = append(out, b)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	return out, nil
}

// buildLog proxies the log of a build of workload ns/name from the node that
// built it: ?commit= (7 to 40 hex digits) or, without one, the commit the
// workload's status names. Of several nodes, the newest build wins.
func (s *Server) buildLog(w http.ResponseWriter, r *http.Request, ns, name string) {
	ctx := r.Context()
	wl, err := s.cfg.Repo.GetWorkload(ctx, ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	commit := strings.ToLower(r.URL.Query().Get("commit"))
	if commit == "" {
		commit = wl.Status.SourceCommit
	}
	if commit == "" {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("workload %s/%s has no build: it is not built from Git, or its commit is not resolved yet", ns, name)})
		return
	}
	if !commitQueryRE.MatchString(commit) {
		writeError(w, badRequest("commit %q: want 7 to 40 hex digits", commit))
		return
	}
	prefix := ""
	if len(commit) >= 12 {
		prefix = commit
	}
	kvs, err := s.cfg.Repo.ListBuildRecordsJSON(ctx, ns, name, prefix)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	var best *api.Build
	for _, kv := range kvs {
		var rec api.Build
		if json.Unmarshal(kv.Value, &rec) != nil || !strings.HasPrefix(rec.Commit, commit) {
			continue
		}
		if best == nil || rec.StartedAt.After(best.StartedAt) {
			best = &rec
		}
	}
	if best == nil {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("no node has built workload %s/%s at %s", ns, name, commit)})
		return
	}
	resp, apiErr := s.callAgent(ctx, best.Node, "/v1alpha1/builds/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+"/"+url.PathEscape(best.Commit)+"/log", nil)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set(api.HeaderNode, best.Node)
	w.Header().Set(api.HeaderCommit, best.Commit)
	w.WriteHeader(resp.StatusCode)
	_ = copyFlushing(w, resp.Body)
}
