package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// maxLabelValue bounds a node label's or taint's value.
const maxLabelValue = 253

// placement sums up the instances placed on one node.
type placement struct {
	instances int
	requested api.NodeRequested
	active    map[string]int
}

// placedOn sums a node's assignments: what they request, and by workload
// type those that have not ended (a Job instance ends when its agent
// reports it Succeeded or Failed; Service and DaemonService instances never
// do). reported maps instance IDs to the phase the node last reported.
func placedOn(as []api.Assignment, reported map[string]string) placement {
	p := placement{instances: len(as)}
	for _, a := range as {
		p.requested.CPUMillis += a.CPUMillis
		p.requested.MemoryBytes += a.MemoryBytes
		if a.GPU != nil {
			p.requested.GPUs++
		}
		if a.Type == quadlet.TypeJob {
			if ph := reported[a.InstanceID]; ph == api.InstanceSucceeded || ph == api.InstanceFailed {
				continue
			}
		}
		if p.active == nil {
			p.active = map[string]int{}
		}
		p.active[a.Type]++
	}
	return p
}

// activeTotal is how many instances of a node have not ended.
func activeTotal(n api.Node) int {
	total := 0
	for _, c := range n.Active {
		total += c
	}
	return total
}

// nodeView returns one node as the API shows it.
func (s *Server) nodeView(ctx context.Context, name string) (*api.Node, error) {
	out, err := s.nodeViews(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Name == name {
			return &out[i], nil
		}
	}
	return nil, nodeNotFound(name)
}

func nodeNotFound(name string) *api.Error {
	return &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "node " + name + " not found"}
}

// changeNode applies change to the {node}'s registration and answers with
// the node. change returns an *api.Error for a request that cannot apply.
func (s *Server) changeNode(w http.ResponseWriter, r *http.Request, what string, change func(*api.NodeRegistration) error) {
	name := chi.URLParam(r, "node")
	if _, err := s.cfg.Repo.UpdateNodeRegistration(r.Context(), name, change); errors.Is(err, resources.ErrNotFound) {
		writeError(w, nodeNotFound(name))
		return
	} else if err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.cfg.Logger.Info().Str("node", name).Str("change", what).Msg("node changed")
	n, err := s.nodeView(r.Context(), name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (s *Server) cordonNode(w http.ResponseWriter, r *http.Request) {
	s.changeNode(w, r, "cordon", func(reg *api.NodeRegistration) error {
		reg.Unschedulable = true
		return nil
	})
}

func (s *Server) uncordonNode(w http.ResponseWriter, r *http.Request) {
	s.changeNode(w, r, "uncordon", func(reg *api.NodeRegistration) error {
		reg.Unschedulable, reg.Draining = false, false
		return nil
	})
}

func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	s.changeNode(w, r, "drain", func(reg *api.NodeRegistration) error {
		reg.Unschedulable, reg.Draining = true, true
		return nil
	})
}

// mergePatchBody is what PATCH .../labels takes: a JSON merge patch, or
// plain JSON of the same shape.
var mergePatchBody = []string{"application/merge-patch+json", "application/json"}

// patchNodeLabels changes a node's labels by a JSON merge patch: "k": "v"
// sets a label, "k": null removes it (a label it does not have is no
// error).
func (s *Server) patchNodeLabels(w http.ResponseWriter, r *http.Request) {
	change, ok := readChecked(s, w, r, mergePatchBody, "label change", checkLabelChange)
	if !ok {
		return
	}
	s.changeNode(w, r, "labels", func(reg *api.NodeRegistration) error {
		labels := maps.Clone(reg.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range change {
			if v == nil {
				delete(labels, k)
			} else {
				labels[k] = *v
			}
		}
		reg.Labels = labels
		return nil
	})
}

// checkLabelChange lists what is wrong with a label change, each problem
// naming its label.
func checkLabelChange(change map[string]*string) []api.FieldDetail {
	if len(change) == 0 {
		return []api.FieldDetail{{Field: "labels", Message: "the change is empty: give at least one label to set or remove"}}
	}
	var out []api.FieldDetail
	for _, k := range slices.Sorted(maps.Keys(change)) {
		field := "labels[" + strconv.Quote(k) + "]"
		if p := labelKeyProblem(k, "="); p != "" {
			out = append(out, api.FieldDetail{Field: field, Message: p})
			continue
		}
		if k == resources.NodeNameLabel {
			out = append(out, api.FieldDetail{Field: field, Message: "is set by KAT to the node's name and cannot be changed"})
			continue
		}
		if v := change[k]; v != nil {
			if p := labelValueProblem(*v, ""); p != "" {
				out = append(out, api.FieldDetail{Field: field, Message: p})
			}
		}
	}
	return out
}

// labelKeyProblem is quadlet.LabelKeyProblem, also refusing the characters
// of reserved that separate a key in katcall's arguments.
func labelKeyProblem(k, reserved string) string {
	if p := quadlet.LabelKeyProblem(k); p != "" {
		return p
	}
	if i := strings.IndexAny(k, reserved); i >= 0 {
		return fmt.Sprintf("key %q must not contain %q", k, k[i:i+1])
	}
	return ""
}

// labelValueProblem says what is wrong with a label's or taint's value, or
// "" when it is valid (empty is valid).
func labelValueProblem(v, reserved string) string {
	switch {
	case len(v) > maxLabelValue:
		return fmt.Sprintf("value must be at most %d characters", maxLabelValue)
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Sprintf("value %q must not contain spaces or control characters", v)
	case reserved != "" && strings.ContainsAny(v, reserved):
		return fmt.Sprintf("value %q must not contain any of %q", v, reserved)
	}
	return ""
}

// patchNodeTaints adds and removes a node's taints (api.TaintChange).
func (s *Server) patchNodeTaints(w http.ResponseWriter, r *http.Request) {
	change, ok := readChecked(s, w, r, jsonBody, "taint change", checkTaintChange)
	if !ok {
		return
	}
	name := chi.URLParam(r, "node")
	s.changeNode(w, r, "taints", func(reg *api.NodeRegistration) error {
		taints, apiErr := applyTaintChange(name, reg.Taints, change)
		if apiErr != nil {
			return apiErr
		}
		reg.Taints = taints
		return nil
	})
}

var taintEffects = []string{api.TaintNoSchedule, api.TaintPreferNoSchedule}

// checkTaintChange lists what is wrong with a taint change on its own, each
// problem naming its field.
func checkTaintChange(c api.TaintChange) []api.FieldDetail {
	if len(c.Add) == 0 && len(c.Remove) == 0 {
		return []api.FieldDetail{{Field: "add", Message: "the change is empty: give at least one taint to add or remove"}}
	}
	var out []api.FieldDetail
	check := func(list string, i int, t api.Taint, adding bool) {
		field := fmt.Sprintf("%s[%d]", list, i)
		if p := labelKeyProblem(t.Key, "=:"); p != "" {
			out = append(out, api.FieldDetail{Field: field + ".key", Message: p})
		}
		if adding {
			if p := labelValueProblem(t.Value, ":"); p != "" {
				out = append(out, api.FieldDetail{Field: field + ".value", Message: p})
			}
		} else if t.Value != "" {
			out = append(out, api.FieldDetail{Field: field + ".value", Message: "must be empty: a taint is removed by key and effect"})
		}
		if (adding || t.Effect != "") && !slices.Contains(taintEffects, t.Effect) {
			out = append(out, api.FieldDetail{Field: field + ".effect",
				Message: fmt.Sprintf("%q must be NoSchedule or PreferNoSchedule", t.Effect)})
		}
	}
	for i, t := range c.Add {
		check("add", i, t, true)
	}
	for i, t := range c.Remove {
		check("remove", i, t, false)
	}
	return out
}

// applyTaintChange returns node's taints cur with change applied, as kubectl
// taint does: removals first (each must match a taint), then additions,
// which replace a taint of the same key and effect only with Overwrite.
func applyTaintChange(node string, cur []api.Taint, change api.TaintChange) ([]api.Taint, *api.Error) {
	out := slices.Clone(cur)
	for i, rm := range change.Remove {
		n := len(out)
		out = slices.DeleteFunc(out, func(t api.Taint) bool {
			return t.Key == rm.Key && (rm.Effect == "" || t.Effect == rm.Effect)
		})
		if len(out) == n {
			what := rm.Key
			if rm.Effect != "" {
				what += ":" + rm.Effect
			}
			return nil, &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeInvalid,
				Message: fmt.Sprintf("taint change: remove[%d]: node %s has no taint %s", i, node, what),
				Details: []api.FieldDetail{{Field: fmt.Sprintf("remove[%d]", i), Message: "node " + node + " has no taint " + what}}}
		}
	}
	for i, add := range change.Add {
		j := slices.IndexFunc(out, func(t api.Taint) bool { return t.Key == add.Key && t.Effect == add.Effect })
		switch {
		case j < 0:
			out = append(out, add)
		case change.Overwrite:
			out[j] = add
		case out[j] != add:
			return nil, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict,
				Message: fmt.Sprintf("taint change: add[%d]: node %s already has taint %s; overwrite it with --overwrite", i, node, out[j])}
		}
	}
	return out, nil
}

// readChecked reads a JSON body (what) of one of the accepted media types
// and checks it; it answers the request itself when the body is refused.
func readChecked[T any](s *Server, w http.ResponseWriter, r *http.Request, accepted []string, what string, check func(T) []api.FieldDetail) (T, bool) {
	var change T
	if apiErr := s.readStrictJSON(w, r, accepted, what, &change); apiErr != nil {
		writeError(w, apiErr)
		return change, false
	}
	if problems := check(change); len(problems) > 0 {
		writeError(w, invalidRequest(what, problems))
		return change, false
	}
	return change, true
}

func invalidRequest(what string, problems []api.FieldDetail) *api.Error {
	return &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeInvalid,
		Message: what + ": " + problems[0].Field + ": " + problems[0].Message, Details: problems}
}

// readStrictJSON reads a JSON body of one of the accepted media types into
// v, refusing fields v does not have, so a misspelt field is an error
// rather than ignored.
func (s *Server) readStrictJSON(w http.ResponseWriter, r *http.Request, accepted []string, what string, v any) *api.Error {
	body, apiErr := readBody(w, r, s.cfg.MaxJSONBytes, accepted)
	if apiErr != nil {
		return apiErr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("%s: invalid JSON: %v", what, err)
	}
	return nil
}

// deleteNode removes a node: its registration, status, heartbeat and
// assignments, and (Config.ForgetNode) its identity, so the name can
// join again. Without ?force=true a Ready node with instances that have not
// ended is refused: drain it first. The leader's node is always refused.
func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "node")
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	n, err := s.nodeView(r.Context(), name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if n.Leader {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"node %s is the leader: it cannot be deleted while it leads (stop its kat-agent so another node takes over first)", name)})
		return
	}
	if active := activeTotal(*n); !force && n.Status == api.NodeReady && active > 0 {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"node %s is Ready and still has %d instances: drain it first (katcall drain %s --wait), or delete it anyway with --force (its Service instances are then placed elsewhere)",
			name, active, name)})
		return
	}
	if s.cfg.ForgetNode != nil {
		if err := s.cfg.ForgetNode(r.Context(), name); err != nil {
			writeError(w, errorFor(fmt.Errorf("forget the identity of node %q: %w", name, err)))
			return
		}
	}
	if err := s.cfg.Repo.DeleteNode(r.Context(), name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	s.cfg.Logger.Info().Str("node", name).Bool("force", force).Msg("node deleted")
	msg := "deleted through the API"
	if force {
		msg += " (forced)"
	}
	s.recordEvent(r.Context(), api.NodeRef(name, n.UID), api.EventNormal, "Deleted", msg)
	w.WriteHeader(http.StatusNoContent)
}

// rotateJoinToken issues a new join token (Config.RotateJoinToken);
// the old one stops working.
func (s *Server) rotateJoinToken(w http.ResponseWriter, r *http.Request) {
	if s.cfg.RotateJoinToken == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal,
			Message: "this server cannot issue join tokens: ask the leader's API"})
		return
	}
	tok, err := s.cfg.RotateJoinToken(r.Context())
	if err != nil {
		writeError(w, errorFor(fmt.Errorf("rotate the join token: %w", err)))
		return
	}
	s.cfg.Logger.Info().Msg("join token rotated")
	writeJSON(w, http.StatusOK, api.JoinTokenResponse{Token: tok})
}
