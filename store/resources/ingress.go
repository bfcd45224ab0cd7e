package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// prefixIngressRoutes holds the leader's ingress routes, one key per
// workload with spec.ingress. Nothing secret: every worker may read it.
const prefixIngressRoutes = "/kat/ingress/routes/"

// IngressRoutesPrefix is the prefix of every workload's ingress routes.
func IngressRoutesPrefix() string { return prefixIngressRoutes }

// IngressRoutesKey is where the routes of workload ns/name live.
func IngressRoutesKey(ns, name string) string { return prefixIngressRoutes + ns + "/" + name }

// ParseIngressRoutesKey splits a key under IngressRoutesPrefix into its
// namespace and workload; ok is false for any other key.
func ParseIngressRoutesKey(key string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(key, prefixIngressRoutes)
	if !found {
		return "", "", false
	}
	ns, name, ok = strings.Cut(rest, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return ns, name, true
}

// DecodeIngressRoutes decodes the record at kv, checking that it names the
// workload its key does.
func DecodeIngressRoutes(kv store.KV) (api.IngressRoutes, error) {
	ns, name, ok := ParseIngressRoutesKey(kv.Key)
	if !ok {
		return api.IngressRoutes{}, fmt.Errorf("%s is not an ingress routes key (%s{ns}/{workload})", kv.Key, prefixIngressRoutes)
	}
	var r api.IngressRoutes
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return api.IngressRoutes{}, fmt.Errorf("decode ingress routes %s: %w", kv.Key, err)
	}
	if r.Namespace != ns || r.Workload != name {
		return api.IngressRoutes{}, fmt.Errorf("ingress routes %s name %s/%s", kv.Key, r.Namespace, r.Workload)
	}
	return r, nil
}

// WriteIngressRoutes puts the records put and deletes the keys del, up to
// 100 changes to a transaction, and returns the store revision after the
// last write (0 when there was nothing to write).
func (r *Repo) WriteIngressRoutes(ctx context.Context, put []api.IngressRoutes, del []string) (int64, error) {
	return putAndDelete(ctx, r, "ingress routes", prefixIngressRoutes, put, func(ir api.IngressRoutes) string {
		return IngressRoutesKey(ir.Namespace, ir.Workload)
	}, del)
}

// ListIngressRoutes returns every workload's routes, sorted by key; keys
// that do not decode are skipped.
func (r *Repo) ListIngressRoutes(ctx context.Context) ([]api.IngressRoutes, error) {
	kvs, err := r.st.List(ctx, prefixIngressRoutes)
	if err != nil {
		return nil, fmt.Errorf("list ingress routes: %w", err)
	}
	out := make([]api.IngressRoutes, 0, len(kvs))
	for _, kv := range kvs {
		if ir, err := DecodeIngressRoutes(kv); err == nil {
			out = append(out, ir)
		}
	}
	return out, nil
}
