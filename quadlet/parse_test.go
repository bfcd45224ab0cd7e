package quadlet

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/canonical")

// minimalWorkload is a small valid Service used by many tests.
const minimalWorkload = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: app
spec:
  type: Service
  source:
    image: nginx:1.27
  replicas: 2
  restartPolicy:
    condition: Always
  container:
    name: app
`

func mustParse(t *testing.T, files map[string]string, opts ParseOptions) *Quadlet {
	t.Helper()
	q, err := ParseWorkload(toFiles(files), opts)
	if err != nil {
		t.Fatalf("ParseWorkload: %v", err)
	}
	return q
}

func toFiles(m map[string]string) map[string][]byte {
	files := make(map[string][]byte, len(m))
	for k, v := range m {
		files[k] = []byte(v)
	}
	return files
}

func TestParseWorkloadDefaults(t *testing.T) {
	t.Parallel()
	q, err := LoadDir("testdata/valid/web", ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := q.Workload
	checks := []struct {
		name      string
		got, want any
	}{
		{"namespace as written", q.Namespace(), "shop"},
		{"name", q.Name(), "web"},
		{"maxSurge as written", w.Spec.UpdateStrategy.Rolling.MaxSurge, FromPercent(25)},
		{"maxRestarts as written", w.Spec.RestartPolicy.MaxRestarts, 10},
		{"resetSeconds defaulted", w.Spec.RestartPolicy.ResetSeconds, 3600},
		{"toleration operator defaulted", w.Spec.Tolerations[1].Operator, "Exists"},
		{"cpu request as written", w.Spec.Container.Resources.Requests.CPU, "100m"},
		{"memory request from limit", w.Spec.Container.Resources.Requests.Memory, "256Mi"},
		{"env on stays on", w.Spec.Container.Env[0].Value, "on"},
		{"env no stays no", w.Spec.Container.Env[1].Value, "no"},
		{"env 0755 stays 0755", w.Spec.Container.Env[2].Value, "0755"},
		{"label no stays no", w.Metadata.Labels["legacy"], "no"},
		{"label key on stays on", w.Metadata.Labels["on"], "yes"},
		{"readOnly", w.Spec.Container.VolumeMounts[1].ReadOnly, true},
		{"port protocol defaulted", q.LoadBalancer.Spec.Ports[0].Protocol, "TCP"},
		{"period as written", q.LoadBalancer.Spec.HealthCheck.PeriodSeconds, 5},
		{"timeout defaulted", q.LoadBalancer.Spec.HealthCheck.TimeoutSeconds, 1},
		{"success threshold defaulted", q.LoadBalancer.Spec.HealthCheck.SuccessThreshold, 1},
		{"failure threshold defaulted", q.LoadBalancer.Spec.HealthCheck.FailureThreshold, 3},
		{"ingress path defaulted", q.LoadBalancer.Spec.Ingress[0].Path, "/"},
		{"ingress path as written", q.LoadBalancer.Spec.Ingress[1].Path, "/metrics"},
		{"no job", q.Job == nil, true},
		{"no build", q.Build == nil, true},
		{"raw files kept", string(q.Files["workload.kat"][:13]), "# A web servi"},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %v, want %v", tc.got, tc.want)
			}
		})
	}
}

func TestParseWorkloadDefaultsByType(t *testing.T) {
	t.Parallel()
	job := `apiVersion: kat.dws.rip/v1alpha1
kind: JobDefinition
`
	build := `apiVersion: kat.dws.rip/v1alpha1
kind: BuildDefinition
spec: {}
`
	git := strings.Replace(minimalWorkload, "    image: nginx:1.27\n", "    git:\n      repository: git@example.com:team/app.git\n", 1)
	tests := []struct {
		name  string
		files map[string]string
		opts  ParseOptions
		check func(t *testing.T, q *Quadlet)
	}{
		{
			name:  "service gets rolling update with maxSurge 1",
			files: map[string]string{"workload.kat": minimalWorkload},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				u := q.Workload.Spec.UpdateStrategy
				if u == nil || u.Type != UpdateRolling || u.Rolling == nil || u.Rolling.MaxSurge != FromInt(1) {
					t.Errorf("updateStrategy = %+v, want Rolling with maxSurge 1", u)
				}
				if q.Namespace() != DefaultNamespace {
					t.Errorf("namespace = %q, want %q", q.Namespace(), DefaultNamespace)
				}
			},
		},
		{
			name:  "default namespace from options",
			files: map[string]string{"workload.kat": minimalWorkload},
			opts:  ParseOptions{DefaultNamespace: "team-a"},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				if q.Namespace() != "team-a" {
					t.Errorf("namespace = %q, want team-a", q.Namespace())
				}
			},
		},
		{
			name: "explicit maxSurge 0 is kept",
			files: map[string]string{"workload.kat": minimalWorkload +
				"  updateStrategy:\n    rolling:\n      maxSurge: 0\n"},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				if got := q.Workload.Spec.UpdateStrategy.Rolling.MaxSurge; got != FromInt(0) {
					t.Errorf("maxSurge = %v, want 0", got)
				}
			},
		},
		{
			name: "MaxCount gets maxRestarts and resetSeconds",
			files: map[string]string{"workload.kat": strings.Replace(minimalWorkload,
				"condition: Always", "condition: MaxCount", 1)},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				r := q.Workload.Spec.RestartPolicy
				if r.MaxRestarts != 5 || r.ResetSeconds != 3600 {
					t.Errorf("restartPolicy = %+v, want maxRestarts 5 and resetSeconds 3600", r)
				}
			},
		},
		{
			name: "job gets completions, parallelism and backoffLimit and no update strategy",
			files: map[string]string{
				"workload.kat": strings.Replace(minimalWorkload, "type: Service", "type: Job", 1),
				"job.kat":      job,
			},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				if s := q.Job.Spec; s.Completions != 1 || s.Parallelism != 1 || s.BackoffLimit != 3 {
					t.Errorf("job spec = %+v, want 1/1/3", s)
				}
				if q.Workload.Spec.UpdateStrategy != nil {
					t.Errorf("updateStrategy = %+v, want nil for a Job", q.Workload.Spec.UpdateStrategy)
				}
			},
		},
		{
			name: "build gets context and Dockerfile",
			files: map[string]string{
				"workload.kat": git,
				"build.kat":    build,
			},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				if s := q.Build.Spec; s.BuildContext != "." || s.DockerfilePath != "./Dockerfile" {
					t.Errorf("build spec = %+v, want . and ./Dockerfile", s)
				}
			},
		},
		{
			name: "gpu driver defaults to any",
			files: map[string]string{"workload.kat": minimalWorkload +
				"    resources:\n      gpu:\n        minVRAM_MB: 4096\n"},
			check: func(t *testing.T, q *Quadlet) {
				t.Helper()
				if g := q.Workload.Spec.Container.Resources.GPU; g == nil || g.Driver != "any" || g.MinVRAMMB != 4096 {
					t.Errorf("gpu = %+v, want driver any and 4096 MiB", g)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustParse(t, tc.files, tc.opts))
		})
	}
}

// TestCanonicalJSONGolden pins the canonical form of every valid example:
// a change here changes every spec hash and redeploys every workload.
func TestCanonicalJSONGolden(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("testdata/valid/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			q, err := LoadDir(dir, ParseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := q.CanonicalJSON()
			if !json.Valid(got) || bytes.ContainsAny(got, "\n\t") {
				t.Fatalf("canonical JSON is not compact valid JSON: %s", got)
			}
			if !bytes.Equal(got, q.CanonicalJSON()) {
				t.Fatal("CanonicalJSON is not stable across calls")
			}
			golden := filepath.Join("testdata", "canonical", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, bytes.TrimSuffix(want, []byte("\n"))) {
				t.Errorf("canonical JSON changed:\ngot  %s\nwant %s", got, want)
			}
		})
	}
}

func TestSpecHashPinned(t *testing.T) {
	t.Parallel()
	q := mustParse(t, map[string]string{"workload.kat": minimalWorkload}, ParseOptions{})
	const wantJSON = `{"Workload":{"apiVersion":"kat.dws.rip/v1alpha1","kind":"Workload","metadata":{"name":"app","namespace":"default"},"spec":{"container":{"name":"app"},"replicas":2,"restartPolicy":{"condition":"Always"},"source":{"image":"nginx:1.27"},"type":"Service","updateStrategy":{"rolling":{"maxSurge":1},"type":"Rolling"}}}}`
	if got := string(q.CanonicalJSON()); got != wantJSON {
		t.Fatalf("CanonicalJSON =\n%s\nwant\n%s", got, wantJSON)
	}
	h := q.SpecHash()
	if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("SpecHash = %q, want 64 lowercase hex digits", h)
	}
}

func TestSpecHashEquivalence(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		"workload.kat": minimalWorkload,
		"VirtualLoadBalancer.kat": `apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: 8080
  ingress:
    - host: app.example.com
      servicePortName: http
`,
	}
	baseHash := mustParse(t, base, ParseOptions{}).SpecHash()
	same := []struct {
		name  string
		files map[string]string
	}{
		{
			name: "keys reordered, comments, flow style, quoting and explicit defaults",
			files: map[string]string{
				"workload.kat": `# The app.
kind: Workload # the kind
apiVersion: "kat.dws.rip/v1alpha1"
spec:
  container: {name: app, stopGracePeriodSeconds: 10}
  restartPolicy: {condition: Always}
  replicas: 2
  updateStrategy:
    type: Rolling
    rolling: {maxSurge: 1}
    progressDeadlineSeconds: 600
    autoRollback: true
  source:
    image: 'nginx:1.27'
  type: Service
metadata:
  namespace: default
  name: app
`,
				"VirtualLoadBalancer.kat": `apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ingress:
    - servicePortName: http
      path: /
      host: app.example.com
  ports:
    - containerPort: 8080
      protocol: TCP
      name: http
`,
			},
		},
		{
			name: "load balancer under another file name",
			files: map[string]string{
				"workload.kat": minimalWorkload,
				"network.kat":  base["VirtualLoadBalancer.kat"],
			},
		},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustParse(t, tc.files, ParseOptions{}).SpecHash(); got != baseHash {
				t.Errorf("SpecHash = %s, want %s", got, baseHash)
			}
		})
	}
	different := []struct {
		name       string
		file, from string
		to         string
	}{
		{"replicas", "workload.kat", "replicas: 2", "replicas: 3"},
		{"image", "workload.kat", "nginx:1.27", "nginx:1.28"},
		{"container port", "VirtualLoadBalancer.kat", "8080", "8081"},
		{"ingress host", "VirtualLoadBalancer.kat", "app.example.com", "www.example.com"},
		{"label added", "workload.kat", "  name: app\nspec", "  name: app\n  labels:\n    a: b\nspec"},
		{"stop grace", "workload.kat", "    name: app", "    name: app\n    stopGracePeriodSeconds: 30"},
		{"progress deadline", "workload.kat", "  replicas: 2", "  replicas: 2\n  updateStrategy: {progressDeadlineSeconds: 60}"},
		{"auto rollback off", "workload.kat", "  replicas: 2", "  replicas: 2\n  updateStrategy: {autoRollback: false}"},
	}
	for _, tc := range different {
		t.Run("changed "+tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range base {
				files[k] = v
			}
			if !strings.Contains(files[tc.file], tc.from) {
				t.Fatalf("%s does not contain %q", tc.file, tc.from)
			}
			files[tc.file] = strings.Replace(files[tc.file], tc.from, tc.to, 1)
			if got := mustParse(t, files, ParseOptions{}).SpecHash(); got == baseHash {
				t.Errorf("SpecHash did not change")
			}
		})
	}
	t.Run("changed namespace through options", func(t *testing.T) {
		if got := mustParse(t, base, ParseOptions{DefaultNamespace: "other"}).SpecHash(); got == baseHash {
			t.Errorf("SpecHash did not change")
		}
	})
}

// TestParseWorkloadErrors checks decoder-level problems (YAML 1.1 words,
// duplicate keys, unknown fields, wrong types) and that all problems come
// back together, sorted, with lines.
func TestParseWorkloadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string // every line of the error, in order
	}{
		{
			name: "yaml 1.1 words stay strings in string fields",
			yaml: minimalWorkload + "    env:\n      - name: A\n        value: yes\n      - name: B\n        value: off\n  nodeSelector:\n    disk: 0755\n    on: no\n",
			want: nil,
		},
		{
			name: "several problems, sorted by line",
			yaml: strings.NewReplacer("name: app\nspec", "name: App\nspec", "replicas: 2", "replicas: -2",
				"condition: Always", "condition: Sometimes").Replace(minimalWorkload) + "  bogus: 1\n  replicas: 3\n",
			want: []string{
				`workload.kat:4: metadata.name: "App" is not a valid name`,
				`workload.kat:9: spec.replicas: must be at least 0, got -2`,
				`workload.kat:11: spec.restartPolicy.condition: must be one of Never, MaxCount, Always, got "Sometimes"`,
				`workload.kat:14: spec.bogus: unknown field "bogus"`,
				`workload.kat:15: spec.replicas: duplicate key "replicas" (first set at line 9)`,
			},
		},
		{
			name: "wrong types everywhere",
			yaml: strings.NewReplacer("replicas: 2", "replicas: [2]", "name: app\n  type", "name: app\n  type").Replace(minimalWorkload) +
				"    command: {a: b}\n    env:\n      - name: A\n        value: [x]\n    volumeMounts:\n      - name: x\n        mountPath: /x\n        readOnly: on\n",
			want: []string{
				`workload.kat:9: spec.replicas: must be a whole number, got a list`,
				`workload.kat:14: spec.container.command: must be a list, got a mapping`,
				`workload.kat:17: spec.container.env[0].value: must be a string, got a list`,
				`workload.kat:19: spec.container.volumeMounts[0].name: volume "x" is not defined in spec.volumes`,
				`workload.kat:21: spec.container.volumeMounts[0].readOnly: must be true or false, got the string "on"`,
			},
		},
		{
			name: "duplicate key inside a list item",
			yaml: minimalWorkload + "    env:\n      - name: A\n        name: B\n",
			want: []string{`workload.kat:16: spec.container.env[0].name: duplicate key "name" (first set at line 15)`},
		},
		{
			name: "null values count as absent",
			yaml: strings.Replace(minimalWorkload, "replicas: 2", "replicas: ~", 1),
			want: []string{`workload.kat:9: spec.replicas: is required for a Service`},
		},
		{
			name: "hexadecimal and separated numbers are refused",
			yaml: strings.Replace(minimalWorkload, "replicas: 2", "replicas: 0x10", 1) + "  tolerations:\n    - key: a\n      operator: Exists\n",
			want: []string{`workload.kat:9: spec.replicas: must be a whole number, got the number 0x10`},
		},
		{
			name: "empty documents around the document are ignored",
			yaml: "---\n---\n" + minimalWorkload + "---\n# trailing\n...\n",
			want: nil,
		},
		{
			name: "aliases are followed",
			yaml: strings.Replace(minimalWorkload, "  name: app\nspec:", "  name: &n app\n  labels:\n    app: *n\nspec:", 1),
			want: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseWorkload(toFiles(map[string]string{"workload.kat": tc.yaml}), ParseOptions{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ParseWorkload: %v", err)
				}
				if tc.name == "aliases are followed" && q.Workload.Metadata.Labels["app"] != "app" {
					t.Errorf("labels = %v, want app=app", q.Workload.Metadata.Labels)
				}
				return
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %v is not an ErrorList", err)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(got), len(tc.want), err)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d = %q, want prefix %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestYAML11WordsKeptVerbatim(t *testing.T) {
	t.Parallel()
	q := mustParse(t, map[string]string{"workload.kat": minimalWorkload +
		"    env:\n      - {name: A, value: on}\n      - {name: B, value: no}\n      - {name: C, value: 0755}\n      - {name: D, value: 1e3}\n      - {name: E, value: ~x}\n"}, ParseOptions{})
	want := []string{"on", "no", "0755", "1e3", "~x"}
	for i, e := range q.Workload.Spec.Container.Env {
		if e.Value != want[i] {
			t.Errorf("env %s = %q, want %q", e.Name, e.Value, want[i])
		}
	}
}

func TestFieldErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  FieldError
		want string
	}{
		{"all parts", FieldError{File: "workload.kat", Line: 12, Field: "spec.replicas", Message: "must be at least 0"}, "workload.kat:12: spec.replicas: must be at least 0"},
		{"no line", FieldError{File: "workload.kat", Field: "spec", Message: "m"}, "workload.kat: spec: m"},
		{"no field", FieldError{File: "a.kat", Line: 3, Message: "m"}, "a.kat:3: m"},
		{"message only", FieldError{Message: "m"}, "m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
	list := ErrorList{{File: "b.kat", Line: 1, Message: "x"}, {File: "a.kat", Line: 2, Message: "y"}, {File: "a.kat", Line: 1, Message: "z"}}
	err := list.err()
	if got, want := err.Error(), "a.kat:1: z\na.kat:2: y\nb.kat:1: x"; got != want {
		t.Errorf("ErrorList = %q, want %q", got, want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Message != "z" {
		t.Errorf("errors.As found %v, want the first FieldError", fe)
	}
	if ErrorList(nil).err() != nil {
		t.Error("empty list is a non-nil error")
	}
}

func TestParseWorkloadFileNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want string
	}{
		{"path", "dir/job.kat", `"dir/job.kat" is not a plain file name`},
		{"no extension", "job", "is not a .kat file"},
		{"bare extension", ".kat", "is not a .kat file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWorkload(toFiles(map[string]string{"workload.kat": minimalWorkload, tc.file: "x: 1\n"}), ParseOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := ParseWorkload(nil, ParseOptions{}); err == nil || !strings.Contains(err.Error(), "workload.kat: file is missing") {
		t.Errorf("ParseWorkload(nil) = %v, want file is missing", err)
	}
}

func TestAliasBomb(t *testing.T) {
	t.Parallel()
	// A mapping of 2000 keys, decoded once as labels, then referred to
	// 2000 times as an env entry where every key is an unknown field: four
	// million problems unless the decoder bounds its work.
	var keys strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&keys, "k%d: v\n    ", i)
	}
	refs := strings.TrimSuffix(strings.Repeat("*m, ", 2000), ", ")
	y := strings.Replace(minimalWorkload, "  name: app\nspec:", "  name: app\n  labels: &m\n    "+keys.String()+"\nspec:", 1) +
		"    env: [" + refs + "]\n"
	_, err := ParseWorkload(toFiles(map[string]string{"workload.kat": y}), ParseOptions{})
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error = %v, want an ErrorList", err)
	}
	if len(list) > maxErrors+1 {
		t.Errorf("got %d problems, want at most %d", len(list), maxErrors+1)
	}
	if !strings.Contains(err.Error(), "too many") {
		t.Errorf("error does not say it stopped:\n%v", err)
	}
}
