package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// secretConsumer is a Service of one replica using key of secret db as env
// (when key is not "") and the secret vol as a volume (when vol is not "").
func secretConsumer(t *testing.T, key, vol string) workload {
	t.Helper()
	w := "apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata: {name: app, namespace: ns1}\nspec:\n  type: Service\n" +
		"  source: {image: localhost/kat-base:latest}\n  replicas: 1\n  restartPolicy: {condition: Always}\n  container:\n    command: [/bin/true]\n"
	if key != "" {
		w += fmt.Sprintf("    env:\n      - name: DB\n        valueFrom: {secretKeyRef: {name: db, key: %q}}\n", key)
	}
	if vol != "" {
		w += fmt.Sprintf("    volumeMounts: [{name: v, mountPath: /run/secrets/x}]\n  volumes: [{name: v, secret: {secretName: %s}}]\n", vol)
	}
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: "app", Type: quadlet.TypeService, Generation: 1},
		map[string][]byte{"workload.kat": []byte(w)})
}

// TestPlanWaitsForSecrets: a workload whose secret or key is missing, or
// that sets a binary key as an environment variable, gets no instance and
// a reason naming them; with its secrets present it is placed.
func TestPlanWaitsForSecrets(t *testing.T) {
	t.Parallel()
	secrets := map[string]api.SecretInfo{"ns1/db": {Namespace: "ns1", Name: "db", Version: 1, Keys: []string{"blob", "password"}, BinaryKeys: []string{"blob"}}}
	get := func(ns, name string) (api.SecretInfo, bool) { s, ok := secrets[ns+"/"+name]; return s, ok }
	for _, c := range []struct {
		name   string
		w      workload
		reason string
	}{
		{"env and volume present", secretConsumer(t, "password", "db"), ""},
		{"missing secret of a volume", secretConsumer(t, "", "other"), "secret ns1/other does not exist"},
		{"missing key", secretConsumer(t, "user", ""), `secret ns1/db has no key "user" (it has: blob, password)`},
		{"binary key as env", secretConsumer(t, "blob", ""), "key blob of secret ns1/db holds binary data: mount it as a file"},
	} {
		n := 0
		plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{c.w}, Now: time.Unix(100, 0), Secret: get,
			NewSuffix: func() string { n++; return fmt.Sprint(n) }})
		sc := plan.Scheduling["ns1/app"]
		switch {
		case c.reason == "" && (len(plan.Put) != 1 || sc.Unplaced != 0):
			t.Errorf("%s: put %d, scheduling %+v; want one placed", c.name, len(plan.Put), sc)
		case c.reason != "" && (len(plan.Put) != 0 || sc.Unplaced != 1 || sc.Reason != c.reason):
			t.Errorf("%s: put %d, scheduling %+v; want none placed, reason %q", c.name, len(plan.Put), sc, c.reason)
		}
	}
	// Without any secret known, the workload waits too.
	plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{secretConsumer(t, "password", "")}, Now: time.Unix(100, 0),
		NewSuffix: func() string { return "x" }})
	if len(plan.Put) != 0 || plan.Scheduling["ns1/app"].Reason != "secret ns1/db does not exist" {
		t.Errorf("no secrets: %+v", plan.Scheduling)
	}
}

// TestSecretVersionRollsEnvConsumers: a new version of a secret set as an
// environment variable makes a new template (a rolling update, old
// instances kept until the new are ready); a secret used only as files
// does not; a workload without secrets keeps its template of before.
func TestSecretVersionRollsEnvConsumers(t *testing.T) {
	t.Parallel()
	secrets := map[string]api.SecretInfo{"ns1/db": {Namespace: "ns1", Name: "db", UID: "u", Version: 1, Keys: []string{"password"}}}
	get := func(ns, name string) (api.SecretInfo, bool) { s, ok := secrets[ns+"/"+name]; return s, ok }
	env, files := secretConsumer(t, "password", ""), secretConsumer(t, "", "db")
	plain := desiredSpec(t, "web", quadlet.TypeService, 1, "v1")
	if got := templateWithSecrets(plain, "", get); got != plain.Spec.TemplateHash {
		t.Errorf("a workload without secrets changed template: %s, want %s", got, plain.Spec.TemplateHash)
	}
	envV1, filesV1 := templateWithSecrets(env, "", get), templateWithSecrets(files, "", get)
	plan := func(w workload, cur []api.Assignment) AssignmentPlan {
		n := 0
		return PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{w}, Current: cur, Now: time.Unix(100, 0), Secret: get,
			NewSuffix: func() string { n++; return fmt.Sprint(n) }})
	}
	first := plan(env, nil)
	if len(first.Put) != 1 || first.Put[0].TemplateHash != envV1 {
		t.Fatalf("first plan: %+v", first.Put)
	}
	secrets["ns1/db"] = api.SecretInfo{Namespace: "ns1", Name: "db", UID: "u", Version: 2, Keys: []string{"password"}}
	if templateWithSecrets(files, "", get) != filesV1 {
		t.Error("a new version changed the template of a file consumer")
	}
	second := plan(env, first.Put)
	if len(second.Put) != 1 || second.Put[0].TemplateHash == envV1 || len(second.Delete) != 0 {
		t.Fatalf("after version 2: put %+v, delete %+v; want one new instance of a new template, none stopped yet", second.Put, second.Delete)
	}
	old, next := first.Put[0], second.Put[0]
	rollouts := map[string]api.Rollout{"ns1/app": {Generation: 1, Outcomes: map[int64]string{1: api.OutcomeSucceeded}}}
	planWith := func(reported map[string]api.InstanceStatus) AssignmentPlan {
		n := 0
		return PlanAssignments(AssignInput{Nodes: oneNode(), Desired: []workload{env}, Current: []api.Assignment{old, next}, Reported: reported,
			Rollouts: rollouts, Now: time.Unix(200, 0), Secret: get, NewSuffix: func() string { n++; return fmt.Sprint(n) }})
	}
	// The new value breaks the application: its instance fails, the old
	// one keeps serving, and nothing is rolled back (the old value is not
	// kept: a new version of the secret is the fix).
	failed := api.InstanceStatus{InstanceID: next.InstanceID, Phase: api.InstanceFailed, State: "exited", ExitCode: 1}
	broken := planWith(map[string]api.InstanceStatus{old.InstanceID: running(old), next.InstanceID: failed})
	if slices.ContainsFunc(broken.Delete, func(a api.Assignment) bool { return a.InstanceID == old.InstanceID }) ||
		slices.ContainsFunc(broken.Put, func(a api.Assignment) bool { return a.InstanceID == old.InstanceID && !a.LeavingAt.IsZero() }) {
		t.Errorf("the old instance is stopped while the new one failed: put %+v, delete %+v", broken.Put, broken.Delete)
	}
	if len(broken.Rollbacks) != 0 {
		t.Errorf("a secret-only change was rolled back: %+v", broken.Rollbacks)
	}
	// Once the new instance is ready, the old one goes.
	done := planWith(map[string]api.InstanceStatus{old.InstanceID: running(old), next.InstanceID: running(next)})
	if !slices.ContainsFunc(done.Delete, func(a api.Assignment) bool { return a.InstanceID == old.InstanceID }) &&
		!slices.ContainsFunc(done.Put, func(a api.Assignment) bool { return a.InstanceID == old.InstanceID && !a.LeavingAt.IsZero() }) {
		t.Errorf("the old instance stays once the new one is ready: put %+v, delete %+v", done.Put, done.Delete)
	}
}

// TestLeaderSecretRefs: the secret references loop gives every node that
// runs an instance using a secret a reference with its current version,
// follows a new version, gives none for a secret no instance on the node
// uses, and removes the references of a deleted workload.
func TestLeaderSecretRefs(t *testing.T) {
	t.Parallel()
	e, _ := newTwoNodeEnv(t)
	ca, err := pki.NewCA("leader-secrets-test")
	if err != nil {
		t.Fatal(err)
	}
	applySecret := func(name, value string) {
		t.Helper()
		s := &quadlet.Secret{Metadata: quadlet.ObjectMeta{Namespace: "ns1", Name: name},
			Values: map[string]quadlet.SecretValue{"password": quadlet.NewSecretValue([]byte(value))}}
		if _, _, err := e.repo.ApplySecret(e.ctx, resources.SecretApply{Secret: s, Owner: api.APIOwner(), KeyID: "k"}, ca); err != nil {
			t.Fatal(err)
		}
	}
	applySecret("db", "one")
	applySecret("unused", "x")
	e.apply(map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: ns1}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: 2
  restartPolicy: {condition: Always}
  container:
    command: [/bin/true]
    volumeMounts: [{name: v, mountPath: /run/secrets/db}]
  volumes: [{name: v, secret: {secretName: db}}]
`)}, api.APIOwner())
	_, stop := e.run(Config{ClusterDomain: testDomain, NodeLossTimeout: 2 * time.Second})
	defer stop()
	refs := func() string {
		kvs, err := e.repo.Store().List(e.ctx, resources.SecretRefsPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, kv := range kvs {
			r, err := resources.DecodeSecretRef(kv)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprintf("%s %s/%s v%d", r.Node, r.Namespace, r.Name, r.Version))
		}
		return strings.Join(lines, "\n")
	}
	wait := func(what, want string) {
		t.Helper()
		var got string
		polltest.Until(t, 10*time.Second, what+":\n"+want, func() bool { got = refs(); return got == want })
	}
	polltest.Until(t, 10*time.Second, "app on n1 and n2", func() bool { return e.onNodes("app") == "n1:1 n2:1" })
	wait("both nodes refer to db", "n1 ns1/db v1\nn2 ns1/db v1")
	applySecret("db", "two")
	wait("both nodes refer to db's version 2", "n1 ns1/db v2\nn2 ns1/db v2")
	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "app", Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	wait("no reference once the workload is gone", "")
}
