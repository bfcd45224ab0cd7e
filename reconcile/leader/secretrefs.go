package leader

import (
	"context"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// secretRefs is the loop that keeps /kat/secretrefs/{node}/ equal to the
// secrets the instances assigned to each node use, with their current
// versions (never a value). It is the records' only writer. A node
// watches its own, so a new version of a secret it mounts as files is
// fetched as soon as it is written, and it learns nothing of the secrets
// it does not use.
type secretRefs struct {
	l *Leader
	// cache is the view's.
	cache *store.Cache[api.SecretRef]
}

func newSecretRefs(l *Leader) *secretRefs {
	return &secretRefs{l: l, cache: l.view.secretRefs}
}

// run runs the loop until ctx ends; the view runs the cache.
func (sr *secretRefs) run(ctx context.Context, sub *subscription) error {
	defer metrics.SetSecrets(0) // no leader, no count: a former leader shows none
	return sr.l.loop(ctx, sub, "secretrefs", sr.once)
}

// once computes every node's references from the assignments and the
// secrets, writes those that differ, deletes those no instance needs, then
// waits until the cache holds the write.
func (sr *secretRefs) once(ctx context.Context, _ []string) error {
	metrics.SetSecrets(sr.l.view.secrets.Len())
	have, _ := sr.cache.Snapshot()
	as, _ := sr.l.view.assigns.Snapshot()
	want := PlanSecretRefs(as, sr.uses, sr.l.view.secret)
	var put []api.SecretRef
	for k, r := range want {
		if old, ok := have[k]; !ok || old != r {
			put = append(put, r)
		}
	}
	var del []string
	for k := range have {
		if _, ok := want[k]; !ok {
			del = append(del, k)
		}
	}
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	slices.SortFunc(put, func(a, b api.SecretRef) int {
		return strings.Compare(resources.SecretRefKey(a.Node, a.Namespace, a.Name), resources.SecretRefKey(b.Node, b.Namespace, b.Name))
	})
	slices.Sort(del)
	rev, err := sr.l.cfg.Repo.WriteSecretRefs(ctx, put, del)
	if err != nil {
		return err
	}
	sr.l.cfg.Logger.Debug().Str("component", "secretrefs").Int("put", len(put)).Int("removed", len(del)).Msg("secret references written")
	return sr.cache.WaitRevision(ctx, rev)
}

// uses returns the names of the secrets a's spec uses, as environment
// variables or volumes.
func (sr *secretRefs) uses(a api.Assignment) []string {
	s := sr.l.view.specs.get(api.WorkloadMeta{Namespace: a.Namespace, Name: a.Workload, SpecHash: a.SpecHash}, a.Files)
	if s == nil {
		return nil
	}
	names := slices.Clone(s.SecretVolumes)
	for _, ref := range s.SecretEnv {
		names = append(names, ref.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// PlanSecretRefs returns, by key, the reference of every node to every
// existing secret that an instance assigned to it (leaving or not) uses.
// A missing secret has none: no instance using it is placed.
func PlanSecretRefs(as map[string]api.Assignment, uses func(api.Assignment) []string,
	secret func(ns, name string) (api.SecretInfo, bool)) map[string]api.SecretRef {
	out := map[string]api.SecretRef{}
	for _, a := range as {
		for _, name := range uses(a) {
			k := resources.SecretRefKey(a.Node, a.Namespace, name)
			if _, ok := out[k]; ok {
				continue
			}
			if s, ok := secret(a.Namespace, name); ok {
				out[k] = api.SecretRef{Node: a.Node, Namespace: a.Namespace, Name: name, UID: s.UID, Version: s.Version}
			}
		}
	}
	return out
}
