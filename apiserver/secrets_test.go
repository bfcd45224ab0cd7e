package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	katmetrics "kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

const apiSentinel = "api-SENTINEL-d00d"

// consumerFiles is a workload using secret db as env and as a volume.
var consumerFiles = map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: default}
spec:
  type: Service
  source: {image: "localhost/x:1"}
  replicas: 1
  restartPolicy: {condition: Always}
  container:
    command: [/bin/true]
    env:
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}
`)}

// TestSecretDelivery: a node gets a secret's values only with its own
// certificate and only while an instance of it uses the secret; the admin
// token, another node, and a node without a consumer get 403, before
// anything tells whether the secret exists. Listing shows no value.
func TestSecretDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	ca, id := secretsCA(t)
	recipient := id.Recipient().String()
	sec := &quadlet.Secret{Metadata: quadlet.ObjectMeta{Namespace: "default", Name: "db"},
		Values: map[string]quadlet.SecretValue{"password": quadlet.NewSecretValue([]byte(apiSentinel))}}
	if _, _, err := f.repo.ApplySecret(ctx, resources.SecretApply{Secret: sec, Owner: api.APIOwner()}, ca); err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{{InstanceID: "app-1", Node: "w1", Namespace: "default", Workload: "app", Files: consumerFiles}}, nil); err != nil {
		t.Fatal(err)
	}
	clients := nodeClients(t, f, func(c *apiserver.Config) {
		c.Secrets = &apiserver.SecretKeys{Identity: id, KeyID: "k", Sealer: ca}
	}, "w1", "w2", api.MetricsCertPrefix+"prom")
	w1, w2, metrics, admin := clients[0], clients[1], clients[2], clients[3]

	d, err := w1.GetNodeSecret(ctx, "w1", "default", "db")
	if err != nil || string(d.Values["password"]) != apiSentinel || d.Version != 1 {
		t.Fatalf("w1 gets db: %+v, %v", d, err)
	}
	for _, c := range []struct {
		name     string
		get      func() error
		status   int
		contains string
	}{
		{"w2 asks as w1", func() error { _, err := w2.GetNodeSecret(ctx, "w1", "default", "db"); return err }, http.StatusForbidden, "node w1 only"},
		{"w2 without a consumer", func() error { _, err := w2.GetNodeSecret(ctx, "w2", "default", "db"); return err }, http.StatusForbidden, "node w2 runs no instance that uses secret default/db"},
		{"w2, a secret that does not exist", func() error { _, err := w2.GetNodeSecret(ctx, "w2", "default", "nope"); return err }, http.StatusForbidden, "runs no instance"},
		{"w1, unused secret", func() error { _, err := w1.GetNodeSecret(ctx, "w1", "default", "other"); return err }, http.StatusForbidden, "runs no instance"},
		{"the admin token", func() error { _, err := admin.GetNodeSecret(ctx, "w1", "default", "db"); return err }, http.StatusForbidden, "own certificate"},
		{"a metrics certificate", func() error {
			_, err := metrics.GetNodeSecret(ctx, api.MetricsCertPrefix+"prom", "default", "db")
			return err
		}, http.StatusForbidden, "may only scrape /metrics"},
	} {
		err := c.get()
		if statusOf(err) != c.status || !strings.Contains(err.Error(), c.contains) || strings.Contains(err.Error(), apiSentinel) {
			t.Errorf("%s: %v; want %d containing %q", c.name, err, c.status, c.contains)
		}
	}

	r, err := admin.SecretsRecipient(ctx)
	if err != nil || r.Recipient != recipient {
		t.Errorf("recipient: %+v, %v; want %s", r, err, recipient)
	}
	list, err := admin.ListSecrets(ctx, "default")
	if err != nil || len(list) != 1 || list[0].Keys[0] != "password" || list[0].UsedBy != nil {
		t.Errorf("list: %+v, %v", list, err)
	}
	// A workload of the namespace that uses it is named.
	q, err := quadlet.ParseWorkload(consumerFiles, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	if list, err := admin.ListSecrets(ctx, ""); err != nil || len(list) != 1 || !slices.Equal(list[0].UsedBy, []string{q.Name()}) {
		t.Errorf("list after a consumer was applied: %+v, %v; want used by %s", list, err, q.Name())
	}
	one, err := admin.GetSecret(ctx, "default", "db")
	b, _ := json.Marshal([]any{list, one})
	if err != nil || strings.Contains(string(b), apiSentinel) || strings.Contains(string(b), "sealed") {
		t.Errorf("get/list show a value or the sealed values: %s, %v", b, err)
	}
	if _, err := admin.GetSecret(ctx, "default", "nope"); statusOf(err) != http.StatusNotFound {
		t.Errorf("get a missing secret: %v, want 404", err)
	}
	// katcall secret set: a SOPS file to the cluster, checked as from Git.
	enc := func(ns, name, password string) []byte {
		b, err := sops.Encrypt([]byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata: {name: "+name+", namespace: "+ns+"}\nstringData: {password: \""+password+"\"}\n"),
			[]*age.X25519Recipient{id.Recipient()}, sops.DefaultRules, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if info, err := admin.PutSecret(ctx, "default", "api", enc("default", "api", apiSentinel)); err != nil || info.Version != 1 || info.Owner.Kind != api.OwnerAPI {
		t.Errorf("put a new secret: %+v, %v", info, err)
	}
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := sops.Encrypt([]byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata: {name: api}\nstringData: {a: \"b\"}\n"),
		[]*age.X25519Recipient{other.Recipient()}, sops.DefaultRules, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.repo.DeleteSecret(ctx, "default", "db", api.APIOwner()); err != nil {
		t.Fatal(err)
	}
	git := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "default/secrets/db.sops.yaml"}
	if _, _, err := f.repo.ApplySecret(ctx, resources.SecretApply{Secret: sec, Owner: git}, ca); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, ns, secret string
		body             []byte
		status           int
		contains         string
	}{
		{"plaintext", "default", "x", []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata: {name: x}\nstringData: {a: \"" + apiSentinel + "\"}\n"), http.StatusBadRequest, "not encrypted"},
		{"another cluster", "default", "api", foreign, http.StatusBadRequest, "not encrypted to this cluster"},
		{"another name", "default", "other", enc("default", "api", apiSentinel), http.StatusBadRequest, "defines secret default/api, the URL default/other"},
		{"git-owned", "default", "db", enc("default", "db", apiSentinel), http.StatusConflict, `managed by git source "config" path "default/secrets/db.sops.yaml"`},
		{"missing namespace", "nope", "x", enc("nope", "x", apiSentinel), http.StatusNotFound, `namespace "nope"`},
		{"too large", "default", "x", make([]byte, quadlet.MaxSecretFileBytes+1), http.StatusRequestEntityTooLarge, "limit"},
	} {
		_, err := admin.PutSecret(ctx, c.ns, c.secret, c.body)
		if statusOf(err) != c.status || !strings.Contains(err.Error(), c.contains) || strings.Contains(err.Error(), apiSentinel) {
			t.Errorf("put %s: %v; want %d containing %q", c.name, err, c.status, c.contains)
		}
	}
	if err := admin.DeleteSecret(ctx, "default", "db"); statusOf(err) != http.StatusConflict {
		t.Errorf("delete a git-owned secret: %v, want 409", err)
	}
	// Its Git file's error is shown on it.
	if _, err := f.repo.PutSourceSpec(ctx, api.SourceSpec{Name: "config", URL: "file:///config"}); err != nil {
		t.Fatal(err)
	}
	pathErr := "default/secrets/db.sops.yaml: sops.mac does not match"
	if err := f.repo.PutSourceStatus(ctx, "config", api.SourceStatus{PathErrors: []api.PathError{{Path: git.Path, Error: pathErr}}}); err != nil {
		t.Fatal(err)
	}
	if one, err := admin.GetSecret(ctx, "default", "db"); err != nil || one.Error != pathErr {
		t.Errorf("get a secret whose file has an error: %+v, %v; want the error", one, err)
	}
	if err := admin.DeleteSecret(ctx, "default", "api"); err != nil {
		t.Errorf("delete an api-owned secret: %v", err)
	}

	entries, err := admin.ListAudit(ctx, api.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	ab, _ := json.Marshal(entries)
	if strings.Contains(string(ab), apiSentinel) || !strings.Contains(string(ab), `"secret"`) {
		t.Errorf("audit entries hold the value, or no secret call: %s", ab)
	}

	// The instance leaves: w1 no longer gets the secret.
	if _, err := f.repo.WriteAssignments(ctx, nil, []api.Assignment{{InstanceID: "app-1", Node: "w1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w1.GetNodeSecret(ctx, "w1", "default", "db"); statusOf(err) != http.StatusForbidden {
		t.Errorf("w1 after its instance left: %v, want 403", err)
	}

	// The metrics count decrypts and deliveries, and name no secret, key
	// or value.
	rec := httptest.NewRecorder()
	katmetrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`kat_secret_deliveries_total{result="delivered"}`, `kat_secret_deliveries_total{result="forbidden"}`,
		`kat_secret_decrypts_total{result="success",via="api"}`, `kat_secret_decrypts_total{result="failure",via="api"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, apiSentinel) || (strings.HasPrefix(line, "kat_secret") && (strings.Contains(line, "password") || strings.Contains(line, "db"))) {
			t.Errorf("/metrics names a value, key or secret: %s", line)
		}
	}
}

// TestSecretDeliveryBySpecHash: the delivery reads a node's assignments
// without their files and a spec's files once: an instance of a spec seen
// before is judged by what its spec was found to use, a new spec by its
// files, and an instance no longer assigned uses nothing.
func TestSecretDeliveryBySpecHash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	ca, id := secretsCA(t)
	for _, name := range []string{"db", "other"} {
		sec := &quadlet.Secret{Metadata: quadlet.ObjectMeta{Namespace: "default", Name: name},
			Values: map[string]quadlet.SecretValue{"password": quadlet.NewSecretValue([]byte(apiSentinel))}}
		if _, _, err := f.repo.ApplySecret(ctx, resources.SecretApply{Secret: sec, Owner: api.APIOwner()}, ca); err != nil {
			t.Fatal(err)
		}
	}
	uses := func(hash string) api.Assignment {
		return api.Assignment{InstanceID: "app-" + hash, Node: "w1", Namespace: "default", Workload: "app", SpecHash: hash, Files: consumerFiles}
	}
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{uses("h1"), uses("h2")}, nil); err != nil {
		t.Fatal(err)
	}
	w1 := nodeClients(t, f, func(c *apiserver.Config) {
		c.Secrets = &apiserver.SecretKeys{Identity: id, KeyID: "k", Sealer: ca}
	}, "w1")[0]
	get := func(name string) error { _, err := w1.GetNodeSecret(ctx, "w1", "default", name); return err }
	for range 2 { // the second time from the specs seen
		if err := get("db"); err != nil {
			t.Fatalf("w1 gets db: %v", err)
		}
		if err := get("other"); statusOf(err) != http.StatusForbidden {
			t.Fatalf("w1 gets other, which no spec uses: %v, want 403", err)
		}
	}
	if _, err := f.repo.WriteAssignments(ctx, nil, []api.Assignment{uses("h1"), uses("h2")}); err != nil {
		t.Fatal(err)
	}
	if err := get("db"); statusOf(err) != http.StatusForbidden {
		t.Errorf("w1 gets db once no instance is assigned: %v, want 403", err)
	}
}

// secretsCA returns a new cluster CA and the age identity derived from it.
func secretsCA(t *testing.T) (*pki.CA, *age.X25519Identity) {
	t.Helper()
	ca, err := pki.NewCA("secrets")
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.AgeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return ca, id
}
