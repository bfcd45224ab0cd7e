package quadlet

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const secretSentinel = "v4lue-SENTINEL-91c2"

// TestParseSecret: a valid Secret merges stringData and data, defaults the
// namespace and marks binary keys.
func TestParseSecret(t *testing.T) {
	t.Parallel()
	s, err := ParseSecretFile("db.yaml", []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Secret
metadata:
  name: db
stringData:
  password: "`+secretSentinel+`"
  empty: ""
data:
  blob: AAEC/f7/
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Namespace() != DefaultNamespace || s.Name() != "db" {
		t.Errorf("name %s/%s", s.Namespace(), s.Name())
	}
	if got := s.Keys(); !reflect.DeepEqual(got, []string{"blob", "empty", "password"}) {
		t.Errorf("keys %v", got)
	}
	if got := s.BinaryKeys(); !reflect.DeepEqual(got, []string{"blob"}) {
		t.Errorf("binary keys %v", got)
	}
	if string(s.Values["password"].Reveal()) != secretSentinel || string(s.Values["blob"].Reveal()) != "\x00\x01\x02\xfd\xfe\xff" {
		t.Error("values differ from the file")
	}
}

// TestParseSecretRefuses: every refusal names file, line, field and limit,
// and none quotes a value.
func TestParseSecretRefuses(t *testing.T) {
	t.Parallel()
	head := "apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  name: db\n"
	many := head + "stringData:\n"
	for i := range MaxSecretKeys + 1 {
		many += fmt.Sprintf("  k%d: \"%s\"\n", i, secretSentinel)
	}
	big := head + "stringData:\n  a: \"" + strings.Repeat("x", MaxSecretBytes/2) + "\"\n  b: \"" + strings.Repeat("y", MaxSecretBytes/2+1) + "\"\n"
	for _, c := range []struct{ name, data, want string }{
		{"number", head + "stringData:\n  port: 5432\n", `db.yaml:6: stringData["port"]: must be a string, got a number: quote it`},
		{"bool", head + "stringData:\n  on: true\n", `db.yaml:6: stringData["on"]: must be a string, got a boolean`},
		{"base64", head + "data:\n  blob: \"" + secretSentinel + "\"\n", `db.yaml:6: data["blob"]: must be base64 (standard alphabet, with padding)`},
		{"twice", head + "stringData:\n  password: \"" + secretSentinel + "\"\ndata:\n  password: eA==\n", `db.yaml:8: data["password"]: defined more than once`},
		{"key", head + "stringData:\n  a b: \"" + secretSentinel + "\"\n", `db.yaml:6: stringData["a b"]: key must be letters, digits, '-', '_' and '.'`},
		{"reserved key", head + "stringData:\n  ..data: \"" + secretSentinel + "\"\n", `stringData["..data"]: key must not be '.' or start with '..'`},
		{"too many keys", many, "db.yaml: 65 keys, more than the limit of 64 (stringData and data together)"},
		{"too large", big, "db.yaml: 262145 bytes of values, more than the limit of 262144"},
		{"kind", "apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata:\n  name: db\n", `db.yaml:2: kind: must be "Secret", got "Workload"`},
		{"name", "apiVersion: kat.dws.rip/v1alpha1\nkind: Secret\nmetadata:\n  namespace: x\nstringData:\n  a: \"" + secretSentinel + "\"\n", "db.yaml:3: metadata.name: is required"},
		{"list", head + "stringData:\n  - \"" + secretSentinel + "\"\n", "db.yaml:5: stringData: must be a mapping of key to string, got a list"},
		{"no keys", head, "db.yaml:1: has no keys: set stringData or data"},
		{"unknown", head + "stringdata:\n  a: \"" + secretSentinel + "\"\n", `db.yaml:5: stringdata: unknown field "stringdata"`},
	} {
		_, err := ParseSecretFile("db.yaml", []byte(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), secretSentinel) || strings.Contains(err.Error(), "xxxxxxxx") {
			t.Errorf("%s: the error quotes a value: %v", c.name, err)
		}
	}
}

// TestSecretValueRedacts: a value prints as [redacted] whatever prints it.
func TestSecretValueRedacts(t *testing.T) {
	t.Parallel()
	v := NewSecretValue([]byte(secretSentinel))
	s := &Secret{Metadata: ObjectMeta{Name: "db"}, Values: map[string]SecretValue{"password": v}}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		out = append(out, fmt.Sprintf(verb, v), fmt.Sprintf(verb, s), fmt.Sprintf(verb, *s))
	}
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, string(j), fmt.Sprint(v), v.String(), v.GoString())
	for _, o := range out {
		if strings.Contains(o, secretSentinel) || strings.Contains(o, fmt.Sprintf("%x", secretSentinel)) {
			t.Errorf("printed the value: %s", o)
		}
	}
	if !strings.Contains(string(j), `"password":"[redacted]"`) {
		t.Errorf("json: %s", j)
	}
	if string(v.Reveal()) != secretSentinel || v.Len() != len(secretSentinel) || !v.Equal(NewSecretValue([]byte(secretSentinel))) {
		t.Error("Reveal, Len or Equal is wrong")
	}
}

// TestSecretRefs lists what a workload uses, and the names enter the spec
// hash.
func TestSecretRefs(t *testing.T) {
	t.Parallel()
	q, err := LoadDir("testdata/valid/secret-consumer", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env, vols := q.Workload.Spec.SecretRefs()
	if !reflect.DeepEqual(env, []SecretKeyRef{{Name: "db", Key: "password"}}) || !reflect.DeepEqual(vols, []string{"db"}) {
		t.Errorf("SecretRefs = %v, %v", env, vols)
	}
	if got := q.Workload.Spec.SecretNames(); !reflect.DeepEqual(got, []string{"db"}) {
		t.Errorf("SecretNames = %v", got)
	}
	h := q.SpecHash()
	q.Workload.Spec.Container.Env[0].ValueFrom.SecretKeyRef.Key = "other"
	if q.SpecHash() == h {
		t.Error("the spec hash ignores the key a variable comes from")
	}
}
