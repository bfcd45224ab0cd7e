package build

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kat.dws.rip/kat/runtime"
)

// podman runs the podman subcommands the runtime driver does not have
// (build, tag, untag, push, images, ps) with the driver's binary and global
// arguments, so builds land in the same storage the agent runs from.
type podman struct {
	rt  *runtime.Podman
	cfg runtime.PodmanConfig
}

func newPodman(rt *runtime.Podman) podman { return podman{rt: rt, cfg: rt.Config()} }

func (p podman) command(ctx context.Context, args ...string) *exec.Cmd {
	return p.commandWith(ctx, nil, nil, args...)
}

// commandWith is command with more environment and global arguments.
func (p podman) commandWith(ctx context.Context, env, global []string, args ...string) *exec.Cmd {
	all := append(append(p.rt.GlobalArgs(), global...), args...)
	cmd := exec.CommandContext(ctx, p.cfg.Binary, all...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.WaitDelay = p.cfg.WaitDelay
	return cmd
}

// run runs podman and returns its stdout; an error holds its stderr.
func (p podman) run(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := p.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, p.error(ctx, args, err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// stream runs podman with stdout and stderr going to w. When ctx ends, the
// containers of its RUN steps are killed first, so that podman fails the
// step and cleans up; podman itself gets SIGTERM when it runs none, and
// SIGKILL after the driver's WaitDelay.
func (p podman) stream(ctx context.Context, w io.Writer, args ...string) error {
	return p.streamWith(ctx, w, nil, nil, args...)
}

// streamWith is stream with more environment and global arguments, which
// the log shows too.
func (p podman) streamWith(ctx context.Context, w io.Writer, env, global []string, args ...string) error {
	cmd := p.commandWith(ctx, env, global, args...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Cancel = func() error {
		if stopBuildContainers("/proc", cmd.Process.Pid) {
			return nil
		}
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	fmt.Fprintf(w, "$ %s\n", shellJoin(slices.Concat(env, []string{"podman"}, global, args)))
	if err := cmd.Run(); err != nil {
		return p.error(ctx, args, err, "")
	}
	return nil
}

func (p podman) error(ctx context.Context, args []string, err error, stderr string) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	msg := strings.TrimSpace(stderr)
	if len(msg) > 1024 {
		msg = "..." + msg[len(msg)-1024:]
	}
	if msg != "" {
		return fmt.Errorf("podman %s: %w: %s", args[0], err, msg)
	}
	return fmt.Errorf("podman %s: %w", args[0], err)
}

// registryArgs are the flags of a pull or push to the registry of ref.
func registryArgs(ref, authFile string, insecure []string) []string {
	var args []string
	if authFile != "" {
		args = append(args, "--authfile", authFile)
	}
	if slices.Contains(insecure, registryHost(ref)) {
		args = append(args, "--tls-verify=false")
	}
	return args
}

// registryHost returns the registry of an image reference the way
// container tools read it: the first path element when it holds a '.' or
// a ':' or is "localhost", else docker.io.
func registryHost(ref string) string {
	first, _, ok := strings.Cut(ref, "/")
	if ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return first
	}
	return "docker.io"
}

// imageInfo is one name of a local image.
type imageInfo struct {
	Name    string // repository:tag
	ID      string
	Created time.Time
}

// listImages returns every name under repository (without "localhost/").
func (p podman) listImages(ctx context.Context, repository string) ([]imageInfo, error) {
	out, err := p.run(ctx, "images", "--format", "json", "--filter", "reference="+repository)
	if err != nil {
		return nil, fmt.Errorf("list images of %s: %w", repository, err)
	}
	var imgs []struct {
		ID      string   `json:"Id"`
		Names   []string `json:"Names"`
		Created int64    `json:"Created"`
	}
	if err := json.Unmarshal(out, &imgs); err != nil {
		return nil, fmt.Errorf("list images of %s: parse podman output: %w", repository, err)
	}
	var infos []imageInfo
	for _, im := range imgs {
		for _, n := range im.Names {
			n = strings.TrimPrefix(n, "localhost/")
			repo, _, ok := strings.Cut(n, ":")
			if ok && repo == repository {
				infos = append(infos, imageInfo{Name: n, ID: im.ID, Created: time.Unix(im.Created, 0)})
			}
		}
	}
	return infos, nil
}

// imagesInUse returns the IDs of the images of every container, running
// or not.
func (p podman) imagesInUse(ctx context.Context) (map[string]bool, error) {
	out, err := p.run(ctx, "ps", "--all", "--format", "json")
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var cs []struct {
		ImageID string `json:"ImageID"`
	}
	if err := json.Unmarshal(out, &cs); err != nil {
		return nil, fmt.Errorf("list containers: parse podman output: %w", err)
	}
	used := map[string]bool{}
	for _, c := range cs {
		used[c.ImageID] = true
	}
	return used, nil
}

// buildArgs returns the podman build arguments of a request, with the
// Dockerfile and context resolved to absolute paths. RUN steps run with
// the OCI isolation and the host's user namespace, as far as podman knows:
// its runtime is the wrapper, which puts them into their own (buildNS).
func buildArgs(req *Request, image, dockerfile, contextDir, iidFile string) []string {
	args := []string{"build", "--tag", image, "--file", dockerfile, "--iidfile", iidFile, "--isolation", "oci", "--userns", "host"}
	keys := make([]string, 0, len(req.Spec.BuildArgs))
	for k := range req.Spec.BuildArgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--build-arg", k+"="+req.Spec.BuildArgs[k])
	}
	if req.Spec.TargetStage != "" {
		args = append(args, "--target", req.Spec.TargetStage)
	}
	if req.Spec.Platform != "" {
		args = append(args, "--platform", req.Spec.Platform)
	}
	// No --label: it costs an extra image commit on every build, and the
	// name already says namespace, workload and commit.
	return append(args, "--", contextDir)
}

// shellJoin renders arguments for the log, quoting those a shell would
// split.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`") {
			out[i] = strconv.Quote(a)
		}
	}
	return strings.Join(out, " ")
}
