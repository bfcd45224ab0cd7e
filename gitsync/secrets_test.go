package gitsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/store/resources"
)

const syncSentinel = "gitsync-SENTINEL-5a9e"

// sealedSecret is a Secret file encrypted to r.
func sealedSecret(t *testing.T, r *age.X25519Recipient, ns, name, password string) []byte {
	t.Helper()
	plain := fmt.Sprintf("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\nstringData:\n  password: %q\n", name, ns, password)
	out, err := sops.Encrypt([]byte(plain), []*age.X25519Recipient{r}, sops.DefaultRules, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSyncSecrets walks a secret file through a config repo: applied sealed,
// a changed value moves the version, a re-encryption does not, a bad file
// is its path's error and keeps the last good version, a second definition
// and a missing namespace are refused, and a removed file prunes the secret.
// No status, event or record holds the value.
func TestSyncSecrets(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	e := newEnv(t)
	id, err := e.ca.AgeIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cluster := id.Recipient()
	ctx := context.Background()
	const path = "default/secrets/db.sops.yaml"
	r.workload("apps/web", "default", "web", 1)
	r.WriteFile(path, sealedSecret(t, cluster, "default", "db", syncSentinel+"1"))
	c1 := r.Commit("secret", nil)
	e.addSource(api.SourceSpec{URL: "file://" + r.Work, Branch: "main"})
	secret := func() *api.Secret {
		t.Helper()
		s, err := e.repo.GetSecret(ctx, "default", "db")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	value := func() string {
		t.Helper()
		_, v, err := e.repo.OpenSecret(ctx, "default", "db", e.ca)
		if err != nil {
			t.Fatal(err)
		}
		return string(v["password"].Reveal())
	}

	st := e.waitApplied("config", c1)
	if len(st.PathErrors) != 0 {
		t.Fatalf("path errors: %+v", st.PathErrors)
	}
	s := secret()
	if s.Version != 1 || s.Owner.Path != path || s.Owner.Source != "config" || value() != syncSentinel+"1" {
		t.Errorf("after the first commit: %+v, value ok %v", s.SecretInfo, value() == syncSentinel+"1")
	}

	r.WriteFile(path, sealedSecret(t, cluster, "default", "db", syncSentinel+"2"))
	c2 := r.Commit("rotate", nil)
	e.waitApplied("config", c2)
	if s := secret(); s.Version != 2 || value() != syncSentinel+"2" {
		t.Errorf("after a new value: version %d", s.Version)
	}

	blob := secret().SourceBlob
	r.WriteFile(path, sealedSecret(t, cluster, "default", "db", syncSentinel+"2"))
	c3 := r.Commit("re-encrypt", nil)
	e.waitApplied("config", c3)
	if s := secret(); s.Version != 2 || s.SourceBlob == blob {
		t.Errorf("after a re-encryption: version %d (want 2), blob changed %v", s.Version, s.SourceBlob != blob)
	}

	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	r.WriteFile(path, []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: \""+syncSentinel+"3\"\n"))
	r.WriteFile("default/secrets/foreign.sops.yaml", sealedSecret(t, other.Recipient(), "default", "foreign", syncSentinel))
	r.WriteFile("default/secrets/again.sops.yaml", sealedSecret(t, cluster, "default", "web", syncSentinel))
	r.WriteFile("default/secrets/copy.sops.yaml", sealedSecret(t, cluster, "default", "web", syncSentinel))
	r.WriteFile("default/secrets/nons.sops.yaml", sealedSecret(t, cluster, "nope", "x", syncSentinel))
	r.WriteFile("default/secrets/kind.sops.yaml", bytes.Replace(sealedSecret(t, cluster, "default", "k", syncSentinel), []byte("kind: Secret"), []byte("kind: Workload"), 1))
	failures := func() float64 {
		t.Helper()
		v, err := metrics.Value("kat_secret_decrypts_total", map[string]string{"via": metrics.SecretViaGit, "result": metrics.ResultFailure})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	failedBefore := failures()
	c4 := r.Commit("bad files", nil)
	st = e.waitApplied("config", c4)
	// Three files do not decrypt (plaintext, another cluster's, a broken
	// MAC); other tests may count more meanwhile.
	if got := failures() - failedBefore; got < 3 {
		t.Errorf("kat_secret_decrypts_total{via=git,result=failure} moved by %v, want at least 3", got)
	}
	errs := map[string]string{}
	for _, pe := range st.PathErrors {
		errs[pe.Path] = pe.Error
	}
	for p, want := range map[string]string{
		path:                                "default/secrets/db.sops.yaml: the file has no sops metadata: it is not encrypted",
		"default/secrets/foreign.sops.yaml": "default/secrets/foreign.sops.yaml: not encrypted to this cluster: its age recipients are " + other.Recipient().String(),
		"default/secrets/copy.sops.yaml":    "default/secrets/copy.sops.yaml: secret default/web is already defined by default/secrets/again.sops.yaml",
		"default/secrets/nons.sops.yaml":    `default/secrets/nons.sops.yaml: namespace "nope" does not exist`,
		// kind is not encrypted: changing it breaks the MAC.
		"default/secrets/kind.sops.yaml": "default/secrets/kind.sops.yaml: sops.mac: does not match",
	} {
		if !strings.HasPrefix(errs[p], want) {
			t.Errorf("path error of %s = %q, want it to start with %q", p, errs[p], want)
		}
	}
	if len(errs) != 5 {
		t.Errorf("path errors: %v, want 5", errs)
	}
	if s := secret(); s.Version != 2 || value() != syncSentinel+"2" {
		t.Errorf("a bad file changed the secret: version %d", s.Version)
	}
	if _, err := e.repo.GetSecret(ctx, "default", "web"); err != nil {
		t.Errorf("the first definition of default/web: %v", err)
	}

	r.Git(r.Work, "rm", "-q", path, "default/secrets/again.sops.yaml")
	c5 := r.Commit("remove", nil)
	e.waitApplied("config", c5)
	if _, err := e.repo.GetSecret(ctx, "default", "db"); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("secret db after its file was removed: %v", err)
	}
	// The file that was refused as a second definition is retried and
	// takes the secret over.
	if s, err := e.repo.GetSecret(ctx, "default", "web"); err != nil || s.Owner.Path != "default/secrets/copy.sops.yaml" {
		t.Errorf("secret web after its first file was removed: %+v, %v; want it defined by copy.sops.yaml", s, err)
	}

	// Nothing the sync wrote holds a value: records, status, events.
	kvs, err := e.repo.Store().List(ctx, "/kat/")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if bytes.Contains(kv.Value, []byte(syncSentinel)) {
			t.Errorf("%s holds a value", kv.Key)
		}
	}
	evs, err := e.repo.ListEvents(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("secret default/db version 2")) {
		t.Errorf("no event names the applied secret: %s", b)
	}
}
