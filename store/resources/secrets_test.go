package resources_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

const secretSentinel = "s3cr3t-SENTINEL-store"

func secretOf(t *testing.T, ns, name string, kv ...string) *quadlet.Secret {
	t.Helper()
	s := &quadlet.Secret{Metadata: quadlet.ObjectMeta{Namespace: ns, Name: name}, Values: map[string]quadlet.SecretValue{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.Values[kv[i]] = quadlet.NewSecretValue([]byte(kv[i+1]))
	}
	return s
}

// TestApplySecret: values are sealed at rest, the version moves only when a
// value changes, Git takes over from the API but not the other way, and a
// missing namespace is refused.
func TestApplySecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	ca, err := pki.NewCA("secrets-test")
	if err != nil {
		t.Fatal(err)
	}
	git := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "default/secrets/db.sops.yaml", Commit: "c1"}
	apply := func(owner api.Owner, kv ...string) (*api.Secret, bool, error) {
		return r.ApplySecret(ctx, resources.SecretApply{Secret: secretOf(t, "default", "db", kv...), Owner: owner, KeyID: "k1"}, ca)
	}
	s, changed, err := apply(api.APIOwner(), "password", secretSentinel, "user", "app")
	if err != nil || !changed || s.Version != 1 || s.UID == "" {
		t.Fatalf("create: %+v, %v, %v", s, changed, err)
	}
	kv, err := st.Get(ctx, resources.SecretKey("default", "db"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(kv.Value, []byte(secretSentinel)) || bytes.Contains(kv.Value, []byte("app")) {
		t.Fatalf("the record holds a value in clear: %s", kv.Value)
	}
	if s, changed, err = apply(git, "password", secretSentinel, "user", "app"); err != nil || changed || s.Version != 1 || s.Owner != git {
		t.Errorf("same values, taken over by git: %+v, %v, %v; want version 1, owner git", s, changed, err)
	}
	if s, changed, err = apply(git, "password", "new", "user", "app"); err != nil || !changed || s.Version != 2 {
		t.Errorf("changed value: %+v, %v, %v; want version 2", s, changed, err)
	}
	if _, _, err = apply(api.APIOwner(), "password", "x"); !errors.Is(err, resources.ErrConflict) || !strings.Contains(err.Error(), "is managed by git source") {
		t.Errorf("api over git: %v; want a conflict naming the source", err)
	}
	rec, values, err := r.OpenSecret(ctx, "default", "db", ca)
	if err != nil || rec.Version != 2 || string(values["password"].Reveal()) != "new" || strings.Join(rec.Keys, ",") != "password,user" {
		t.Errorf("open: %+v, %v", rec, err)
	}
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.OpenSecret(ctx, "default", "db", other); !errors.Is(err, pki.ErrSealBroken) {
		t.Errorf("open with another CA: %v", err)
	}
	if _, _, err := r.ApplySecret(ctx, resources.SecretApply{Secret: secretOf(t, "nope", "db", "a", "b"), Owner: git}, ca); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("missing namespace: %v", err)
	}
	list, err := r.ListSecrets(ctx, "")
	if err != nil || len(list) != 1 || list[0].Name != "db" || list[0].Version != 2 {
		t.Errorf("list: %+v, %v", list, err)
	}
	if err := r.DeleteSecret(ctx, "default", "db", api.APIOwner()); !errors.Is(err, resources.ErrConflict) {
		t.Errorf("api deletes a git secret: %v", err)
	}
	if err := r.DeleteSecret(ctx, "default", "db", git); err != nil {
		t.Errorf("git deletes its secret: %v", err)
	}
	if _, err := r.GetSecret(ctx, "default", "db"); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

// TestNoWorkerGrantCoversSecrets: no key a worker may read is, or lies
// under, the secrets' prefix or another node's secret references, or is
// a prefix of them; its own references it may read.
func TestNoWorkerGrantCoversSecrets(t *testing.T) {
	t.Parallel()
	for _, forbidden := range []string{resources.SecretsPrefix(""), resources.NodeSecretRefsPrefix("w10"), resources.NodeSecretRefsPrefix("w2")} {
		for _, g := range resources.WorkerGrants("w1") {
			if strings.HasPrefix(g.Key, forbidden) || (g.Prefix && strings.HasPrefix(forbidden, g.Key)) {
				t.Errorf("worker grant %+v covers %s", g, forbidden)
			}
		}
	}
	own := resources.SecretRefKey("w1", "default", "db")
	if !slices.ContainsFunc(resources.WorkerGrants("w1"), func(g store.Grant) bool { return g.Prefix && strings.HasPrefix(own, g.Key) }) {
		t.Errorf("w1 may not read its own secret reference %s", own)
	}
}
