package containerspec

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// TestSecretEnvRunsWhatTheImageWould: a container with secret variables
// starts through the wrapper, which runs what Podman would have run
// without it: the workload's command, else the image's entrypoint; the
// workload's args, else the image's cmd when no command is given.
func TestSecretEnvRunsWhatTheImageWould(t *testing.T) {
	t.Parallel()
	entry := &runtime.ImageConfig{Entrypoint: []string{"/entry", "-x"}, Cmd: []string{"serve", "--port=1"}}
	cmdOnly := &runtime.ImageConfig{Cmd: []string{"/bin/sh"}}
	emptyEntry := &runtime.ImageConfig{Entrypoint: []string{""}, Cmd: []string{"/bin/app"}}
	tests := []struct {
		name          string
		command, args string // YAML flow lists, "" for none
		image         *runtime.ImageConfig
		want          []string
		wantErr       string
	}{
		{name: "command and args", command: `[/bin/sh, -c]`, args: `["sleep 1"]`, image: entry, want: []string{"/bin/sh", "-c", "sleep 1"}},
		{name: "command only drops the image's cmd", command: `[/bin/app]`, image: entry, want: []string{"/bin/app"}},
		{name: "command without an image read", command: `[/bin/app]`, want: []string{"/bin/app"}},
		{name: "args to the image's entrypoint", args: `[other]`, image: entry, want: []string{"/entry", "-x", "other"}},
		{name: "the image's entrypoint and cmd", image: entry, want: []string{"/entry", "-x", "serve", "--port=1"}},
		{name: "the image's cmd alone", image: cmdOnly, want: []string{"/bin/sh"}},
		{name: "an entrypoint of empty string is none", image: emptyEntry, want: []string{"/bin/app"}},
		{name: "args alone replace the cmd", args: `[/bin/true]`, image: cmdOnly, want: []string{"/bin/true"}},
		{name: "nothing to run", image: &runtime.ImageConfig{}, wantErr: "has neither entrypoint nor cmd"},
		{name: "the image was not read", wantErr: "the image's entrypoint was not read"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ct := ""
			if tc.command != "" {
				ct += "\n    command: " + tc.command
			}
			if tc.args != "" {
				ct += "\n    args: " + tc.args
			}
			q := appWithContainer(t, ct+`
    env:
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}`)
			if got, want := NeedsImageConfig(q), tc.command == ""; got != want {
				t.Errorf("NeedsImageConfig = %t, want %t", got, want)
			}
			cs, err := For(q, Instance{ID: "app-1", Secrets: &SecretPaths{Dir: "/s/app-1", Agent: "/usr/bin/kat-agent", Image: tc.image}})
			if tc.wantErr != "" {
				if !errors.Is(err, runtime.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "spec.container.command") {
					t.Fatalf("err = %v, want ErrInvalidSpec naming spec.container.command and %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := append(slices.Clone(cs.Command), cs.Args...)
			if want := ExecEnvArgv(tc.want); !slices.Equal(got, want) {
				t.Errorf("argv = %q, want %q", got, want)
			}
		})
	}
}

// TestPlainWorkloadNeedsNoImageConfig: without secret variables the image
// is never read, with or without a command.
func TestPlainWorkloadNeedsNoImageConfig(t *testing.T) {
	t.Parallel()
	if NeedsImageConfig(appWithContainer(t, "\n    env: [{name: PLAIN, value: x}]")) {
		t.Error("a workload without secret variables needs the image's entrypoint")
	}
}

// appWithContainer parses a Service whose spec.container is container
// (lines indented by four spaces, after a newline).
func appWithContainer(t *testing.T, container string) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: default}
spec:
  type: Service
  source: {image: "localhost/kat-base:latest"}
  replicas: 1
  restartPolicy: {condition: Always}
  container:` + container + "\n")}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}
