package apiserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// ErrNodeNameTaken is what a Joiner returns when the name a node asks for
// belongs to another node: the join is answered 409.
var ErrNodeNameTaken = errors.New("node name taken")

// Joiner signs a joining node's certificate and registers the node. The
// server calls it only with a checked request whose secret matched, and
// fills in the answer's Cluster itself.
type Joiner func(ctx context.Context, req api.JoinRequest) (*api.JoinResponse, error)

// getCA serves the cluster CA certificate to anyone: it is public, and a
// joining node checks it against its token's fingerprint.
func (s *Server) getCA(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(s.cfg.CACertPEM)
}

// postJoin admits a node that holds the join token's secret. A missing or
// wrong secret is a 403 that writes nothing and counts as a failed
// authentication of the address.
func (s *Server) postJoin(w http.ResponseWriter, r *http.Request) {
	addr, blocked := s.refuseBlocked(w, r)
	if blocked {
		return
	}
	var req api.JoinRequest
	if apiErr := readJSON(w, r, max(s.cfg.MaxJSONBytes, 64<<10), "join request", &req); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	hash, err := s.cfg.Repo.JoinTokenHash(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if req.Secret == "" || !resources.TokenMatches(hash, req.Secret) {
		if s.authFailures != nil {
			s.authFailures.OnLimit(headerSink{}, r, addr)
		}
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "invalid join token: use the token kat-agent init printed (or katcall token rotate issued last)"})
		return
	}
	noteActor(r, api.ActorJoinToken)
	noteName(r, req.NodeName)
	if req.EtcdPeer && !resources.TokenMatches(s.cfg.AdminTokenHash, req.AdminToken) {
		if s.authFailures != nil {
			s.authFailures.OnLimit(headerSink{}, r, addr)
		}
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "join --etcd-peer: adminToken: missing or wrong: an etcd member receives the cluster's CA key and tokens, so it must also hold the admin token (--admin-token-file, a copy of the leader's DATA_DIR/admin.token)"})
		return
	}
	if problems := checkJoinRequest(&req); len(problems) > 0 {
		writeError(w, &api.Error{StatusCode: http.StatusBadRequest, Code: api.CodeInvalid,
			Message: "join request: " + problems[0].Field + ": " + problems[0].Message, Details: problems})
		return
	}
	cluster, err := s.clusterView(r.Context())
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if req.ParentClusterName != "" && req.ParentClusterName != cluster.Name {
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: fmt.Sprintf(
			"join request: parentClusterName: the node asks to join cluster %q, this is cluster %q: check --parent-cluster-name and --leader-api",
			req.ParentClusterName, cluster.Name)})
		return
	}
	resp, err := s.cfg.Join(r.Context(), req)
	switch {
	case errors.Is(err, ErrNodeNameTaken):
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict, Message: err.Error()})
		return
	case errors.Is(err, pki.ErrInvalidPEM):
		writeError(w, badRequest("join request: csr: %v", err))
		return
	case err != nil:
		writeError(w, errorFor(err))
		return
	}
	resp.Cluster = *cluster
	s.cfg.Logger.Info().Str("node", req.NodeName).Str("address", req.AdvertiseAddress).Str("from", addr).Msg("node joined")
	writeJSON(w, http.StatusOK, resp)
}

// checkJoinRequest lists what is wrong with a join request, each problem
// naming its field.
func checkJoinRequest(req *api.JoinRequest) []api.FieldDetail {
	var out []api.FieldDetail
	bad := func(field, format string, args ...any) {
		out = append(out, api.FieldDetail{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if p := resources.NodeNameProblem(req.NodeName); p != "" {
		bad("nodeName", "%s", p)
	}
	if req.NodeUID == "" || len(req.NodeUID) > 64 {
		bad("nodeUID", "must be 1 to 64 characters")
	}
	if ip := net.ParseIP(req.AdvertiseAddress); ip == nil || ip.IsUnspecified() {
		bad("advertiseAddress", "%q is not a usable IP address", req.AdvertiseAddress)
	}
	if req.AgentPort < 1 || req.AgentPort > 65535 {
		bad("agentPort", "%d is not a port (1-65535)", req.AgentPort)
	}
	for _, k := range slices.Sorted(maps.Keys(req.Labels)) {
		if p := quadlet.LabelKeyProblem(k); p != "" {
			bad("labels["+strconv.Quote(k)+"]", "%s", p)
		}
	}
	if req.CSR == "" {
		bad("csr", "is required")
	}
	for _, p := range overlayProblems(req.WireGuardPublicKey, req.WireGuardPort) {
		bad("wireGuard"+p.Field, "%s", p.Message)
	}
	return out
}

// overlayProblems checks a node's WireGuard public key and port, as a join
// request or a status report carries them: no key means no overlay (the
// port must then be unset too); a key must be base64 of 32 bytes and come
// with a port. Fields are named "PublicKey" and "Port".
func overlayProblems(key string, port int) []api.FieldDetail {
	var out []api.FieldDetail
	if key == "" {
		if port != 0 {
			out = append(out, api.FieldDetail{Field: "Port", Message: "is set without a public key"})
		}
		return out
	}
	if raw, err := base64.StdEncoding.DecodeString(key); err != nil || len(raw) != 32 {
		out = append(out, api.FieldDetail{Field: "PublicKey", Message: fmt.Sprintf("%q is not a WireGuard key (base64 of 32 bytes)", key)})
	}
	if port < 1 || port > 65535 {
		out = append(out, api.FieldDetail{Field: "Port", Message: fmt.Sprintf("%d is not a port (1-65535)", port)})
	}
	return out
}
