package containerspec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// Where a container with secret environment variables finds the wrapper
// and its variables: kat-agent itself and the instance's env directory of
// the agent's tmpfs, both bind-mounted read-only.
const (
	ExecEnvBinary = "/.kat/kat-agent"
	ExecEnvDir    = "/.kat/env"
	execEnvVerb   = "exec-env"
)

// ExecEnvArgv is the command of a container whose secret environment
// variables the wrapper sets before it executes argv.
func ExecEnvArgv(argv []string) []string {
	return append([]string{ExecEnvBinary, execEnvVerb, ExecEnvDir, "--"}, argv...)
}

// ExecEnvMain is the wrapper, run inside a container as its entrypoint
// ("kat-agent exec-env DIR -- ARGV..."): it sets one environment variable
// per file of DIR (the file's name and content), replacing one of the same
// name, and executes ARGV, found on PATH. It returns at once when the
// program was not started so, and never returns otherwise. Values stay out
// of Podman's store (its --env is written to disk); an error names the
// variable or path, never a value, and exits 127.
func ExecEnvMain() {
	if len(os.Args) < 2 || os.Args[1] != execEnvVerb {
		return
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "kat exec-env: "+format+"\n", args...)
		os.Exit(127)
	}
	if len(os.Args) < 5 || os.Args[3] != "--" {
		fail("usage: %s DIR -- COMMAND [ARG...]", execEnvVerb)
	}
	dir, argv := os.Args[2], os.Args[4:]
	ents, err := os.ReadDir(dir)
	if err != nil {
		fail("read %s: %v", dir, err)
	}
	env := os.Environ()
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			fail("read variable %s: %v", e.Name(), err)
		}
		prefix := e.Name() + "="
		kept := env[:0]
		for _, kv := range env {
			if !strings.HasPrefix(kv, prefix) {
				kept = append(kept, kv)
			}
		}
		env = append(kept, prefix+string(b))
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fail("find %s: %v", argv[0], err)
	}
	err = syscall.Exec(path, argv, env)
	fail("run %s: %v", path, err)
}

// hasSecretEnv reports whether ct sets an environment variable from a
// secret: its container starts through the wrapper.
func hasSecretEnv(ct *quadlet.Container) bool {
	return slices.ContainsFunc(ct.Env, func(e quadlet.EnvVar) bool { return e.ValueFrom != nil })
}

// NeedsImageConfig reports whether q's container starts through the
// wrapper of secret environment variables without a command of its own:
// For then needs the image's entrypoint and cmd (SecretPaths.Image).
func NeedsImageConfig(q *quadlet.Quadlet) bool {
	ct := &q.Workload.Spec.Container
	return len(ct.Command) == 0 && hasSecretEnv(ct)
}

// wrapSecretEnv makes the container start through the wrapper, which sets
// the secret environment variables from the instance's env directory and
// executes the workload's command and args.
func wrapSecretEnv(cs *runtime.ContainerSpec, ct *quadlet.Container, inst Instance, where string) error {
	switch {
	case inst.Secrets == nil:
		return fmt.Errorf("%w: workload %s: spec.container.env: the agent holds no secrets for instance %s", runtime.ErrInvalidSpec, where, inst.ID)
	case inst.Secrets.Agent == "":
		return fmt.Errorf("%w: workload %s: spec.container.env: secret environment variables cannot be set: %s", runtime.ErrInvalidSpec, where, inst.Secrets.AgentProblem)
	}
	var img runtime.ImageConfig
	if len(ct.Command) == 0 {
		if inst.Secrets.Image == nil {
			return fmt.Errorf("%w: workload %s: spec.container.command: the image's entrypoint was not read (the wrapper of secret environment variables runs it)", runtime.ErrInvalidSpec, where)
		}
		img = *inst.Secrets.Image
	}
	// The wrapper runs what Podman would have run without it. Args are
	// given in full, so that Podman appends no image CMD.
	run := img.Argv(ct.Command, ct.Args)
	if len(run) == 0 {
		return fmt.Errorf("%w: workload %s: spec.container.command: required with secret environment variables: image %s has neither entrypoint nor cmd", runtime.ErrInvalidSpec, where, cs.Image)
	}
	argv := ExecEnvArgv(run)
	cs.Command, cs.Args = argv[:1], argv[1:]
	cs.Mounts = append(cs.Mounts,
		runtime.Mount{Source: inst.Secrets.Agent, Target: ExecEnvBinary, ReadOnly: true},
		runtime.Mount{Source: inst.Secrets.EnvDir(), Target: ExecEnvDir, ReadOnly: true})
	return nil
}
