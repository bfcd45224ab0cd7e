package apiserver

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"

	"github.com/go-chi/chi/v5"

	"filippo.io/age"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// SecretKeys are the leader's keys of secrets: the cluster's age identity
// (its recipient is published) to decrypt what katcall secret set sends,
// and the CA that seals values and opens them for delivery to nodes.
type SecretKeys struct {
	Identity *age.X25519Identity
	KeyID    string
	Sealer   resources.Sealer
}

func (s *Server) routeSecrets(r chi.Router) {
	r.Get("/secrets/recipient", s.secretsRecipient)
	r.Get("/secrets", s.listSecrets)
	r.Get("/n/{ns}/secrets", s.listSecrets)
	r.Get("/n/{ns}/secrets/{name}", s.getSecret)
	r.Put("/n/{ns}/secrets/{name}", s.putSecret)
	r.Delete("/n/{ns}/secrets/{name}", s.deleteSecret)
}

func (s *Server) secretsUnavailable(w http.ResponseWriter) bool {
	if s.cfg.Secrets == nil {
		writeError(w, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: "this server cannot open secrets (it does not hold the cluster CA key)"})
		return true
	}
	return false
}

func (s *Server) secretsRecipient(w http.ResponseWriter, _ *http.Request) {
	if s.secretsUnavailable(w) {
		return
	}
	writeJSON(w, http.StatusOK, api.SecretsRecipient{Recipient: s.cfg.Secrets.Identity.Recipient().String(), KeyID: s.cfg.Secrets.KeyID})
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	ns := ""
	if chi.URLParam(r, "ns") != "" {
		var ok bool
		if ns, ok = s.namespaceParam(w, r); !ok {
			return
		}
	}
	out, err := s.cfg.Repo.ListSecrets(r.Context(), ns)
	if err == nil {
		err = s.describeSecrets(r.Context(), ns, out)
	}
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// describeSecrets fills in what the records do not hold: the workloads
// using each secret and its Git file's error.
func (s *Server) describeSecrets(ctx context.Context, ns string, out []api.SecretInfo) error {
	if len(out) == 0 {
		return nil
	}
	users, err := s.cfg.Repo.SecretUsers(ctx, ns, s.secretUses.ofSpec)
	if err != nil {
		return err
	}
	sources, err := s.cfg.Repo.ListSources(ctx)
	if err != nil {
		return err
	}
	for i := range out {
		sec := &out[i]
		sec.UsedBy = users[sec.Namespace+"/"+sec.Name]
		if sec.Owner.Kind != api.OwnerGit {
			continue
		}
		for _, src := range sources {
			if src.Spec.Name != sec.Owner.Source {
				continue
			}
			for _, pe := range src.Status.PathErrors {
				if pe.Path == sec.Owner.Path {
					sec.Error = pe.Error
				}
			}
		}
	}
	return nil
}

func (s *Server) getSecret(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.secretParams(w, r)
	if !ok {
		return
	}
	sec, err := s.cfg.Repo.GetSecret(r.Context(), ns, name)
	out := []api.SecretInfo{}
	if err == nil {
		out = append(out, sec.SecretInfo)
		err = s.describeSecrets(r.Context(), ns, out)
	}
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	writeJSON(w, http.StatusOK, out[0])
}

// putSecret writes an API-owned secret from a SOPS file encrypted to the
// cluster (katcall secret set encrypts on the operator's machine): it is
// decrypted and checked exactly as a file from Git. A Git-owned secret is
// refused (409) naming its source and file.
func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	if s.secretsUnavailable(w) {
		return
	}
	ns, name, ok := s.secretParams(w, r)
	if !ok {
		return
	}
	body, apiErr := readBody(w, r, quadlet.MaxSecretFileBytes, yamlBody)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	file := name + quadlet.SecretSuffixes[0]
	doc, err := sops.Decrypt(body, s.cfg.Secrets.Identity)
	if err != nil {
		metrics.SecretDecrypted(metrics.SecretViaAPI, err)
		writeError(w, badRequest("%s: %v", file, err))
		return
	}
	sec, err := quadlet.ParseSecret(file, doc.Tree)
	metrics.SecretDecrypted(metrics.SecretViaAPI, err)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	if sec.Namespace() != ns || sec.Name() != name {
		writeError(w, badRequest("%s: the file defines secret %s/%s, the URL %s/%s", file, sec.Namespace(), sec.Name(), ns, name))
		return
	}
	noteName(r, name)
	rec, changed, err := s.cfg.Repo.ApplySecret(r.Context(), resources.SecretApply{Secret: sec, Owner: api.APIOwner(),
		Recipient: doc.Recipient, KeyID: s.cfg.Secrets.KeyID}, s.cfg.Secrets.Sealer)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	status := http.StatusOK
	if changed && rec.Version == 1 {
		status = http.StatusCreated
	}
	writeJSON(w, status, rec.SecretInfo)
}

// deleteSecret deletes an API-owned secret; a Git-owned one is refused
// (409): delete its file.
func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.secretParams(w, r)
	if !ok {
		return
	}
	noteName(r, name)
	if err := s.cfg.Repo.DeleteSecret(r.Context(), ns, name, api.APIOwner()); err != nil {
		writeError(w, errorFor(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) secretParams(w http.ResponseWriter, r *http.Request) (ns, name string, ok bool) {
	if ns, ok = s.namespaceParam(w, r); !ok {
		return "", "", false
	}
	name = chi.URLParam(r, "name")
	if !quadlet.IsDNSLabel(name) {
		writeError(w, badRequest("invalid secret name %q in the URL: must be a DNS label", name))
		return "", "", false
	}
	return ns, name, true
}

// requireNodeCert lets through only a node's own certificate (common name
// = the URL's {node}); never the admin token, which is a bearer credential
// copied into katcall.yaml files, nor a metrics certificate.
func (s *Server) requireNodeCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		node := chi.URLParam(r, "node")
		if cn, ok := peerCN(r); ok && !isMetricsCert(r) && cn == node {
			noteActor(r, "node:"+node)
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "secrets are delivered to node " + node + " only, with its own certificate"})
	})
}

// deliverSecret answers a node the values of a secret one of its
// instances uses. Whether it uses it is checked before whether the secret
// exists, so a node learns nothing of the secrets it does not use.
func (s *Server) deliverSecret(w http.ResponseWriter, r *http.Request) {
	if s.secretsUnavailable(w) {
		return
	}
	node := chi.URLParam(r, "node")
	ns, name, ok := s.secretParams(w, r)
	if !ok {
		return
	}
	uses, err := s.nodeUsesSecret(r.Context(), node, ns, name)
	if err != nil {
		metrics.SecretDelivered(metrics.ResultFailure)
		writeError(w, errorFor(err))
		return
	}
	if !uses {
		metrics.SecretDelivered(metrics.DeliveryForbidden)
		writeError(w, &api.Error{StatusCode: http.StatusForbidden, Code: api.CodeForbidden,
			Message: "node " + node + " runs no instance that uses secret " + ns + "/" + name})
		return
	}
	sec, values, err := s.cfg.Repo.OpenSecret(r.Context(), ns, name, s.cfg.Secrets.Sealer)
	if err != nil {
		if errors.Is(err, resources.ErrNotFound) {
			metrics.SecretDelivered(metrics.DeliveryNotFound)
		} else {
			metrics.SecretDelivered(metrics.ResultFailure)
		}
		writeError(w, errorFor(err))
		return
	}
	metrics.SecretDelivered(metrics.DeliveryDelivered)
	out := api.SecretDelivery{Namespace: ns, Name: name, UID: sec.UID, Version: sec.Version, Values: make(map[string][]byte, len(values))}
	for k, v := range values {
		out.Values[k] = v.Reveal()
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, out)
}

// nodeUsesSecret reports whether an instance assigned to node uses secret
// ns/name. The assignments are read without their files; an assignment's
// files are read only when its spec was not seen before.
func (s *Server) nodeUsesSecret(ctx context.Context, node, ns, name string) (bool, error) {
	as, err := s.cfg.Repo.ListAssignmentsWithoutFiles(ctx, node)
	if err != nil {
		return false, err
	}
	for _, a := range as {
		if a.Namespace != ns {
			continue
		}
		names, err := s.secretUses.ofSpec(a.Namespace, a.SpecHash, func() (map[string][]byte, error) {
			full, err := s.cfg.Repo.GetAssignment(ctx, node, a.InstanceID)
			return full.Files, err
		})
		if errors.Is(err, resources.ErrNotFound) {
			continue // gone since the listing
		}
		if err != nil {
			return false, err
		}
		if slices.Contains(names, name) {
			return true, nil
		}
	}
	return false, nil
}

// secretUses remembers, by spec hash, the secrets the workload files of
// assignments refer to: agents ask every few seconds, and a spec is parsed
// once. It is safe for concurrent use.
type secretUses struct {
	mu    sync.Mutex
	names map[string][]string
}

// maxSecretUses bounds the memory: past it the map starts afresh.
const maxSecretUses = 4096

// ofSpec returns the names of the secrets the spec of hash specHash (in
// namespace ns) uses; files are read only when the hash is new to it.
func (u *secretUses) ofSpec(ns, specHash string, files func() (map[string][]byte, error)) ([]string, error) {
	u.mu.Lock()
	names, ok := u.names[specHash]
	u.mu.Unlock()
	if ok && specHash != "" {
		return names, nil
	}
	fs, err := files()
	if err != nil {
		return nil, err
	}
	if q, err := quadlet.ParseWorkload(fs, quadlet.ParseOptions{DefaultNamespace: ns}); err == nil {
		names = q.Workload.Spec.SecretNames()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.names == nil || len(u.names) >= maxSecretUses {
		u.names = map[string][]string{}
	}
	u.names[specHash] = names
	return names, nil
}
