package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrHostPrerequisite matches errors caused by a program Podman needs that is
// missing on the host, such as iptables for netavark. Retrying cannot help
// until it is installed; the error says what to install.
var ErrHostPrerequisite = errors.New("runtime: a program podman needs is missing on this host")

// PodmanHelperDirs are the directories Podman looks for its helper programs
// in (containers.conf helper_binaries_dir, Podman 4's default).
var PodmanHelperDirs = []string{"/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman", "/usr/lib/podman"}

// cniPluginDirs are where the CNI backend finds its plugins.
var cniPluginDirs = []string{"/usr/local/libexec/cni", "/usr/libexec/cni", "/usr/local/lib/cni", "/usr/lib/cni", "/opt/cni/bin"}

// requirement is one program Podman's container networking runs.
type requirement struct {
	name string
	// pkg is the Debian package that installs it.
	pkg string
	// why says what needs it.
	why string
	// helper: found in PodmanHelperDirs; cni: in cniPluginDirs; else in
	// PATH.
	helper, cni bool
}

// hostRequirements lists, per Podman network backend, what it runs.
func hostRequirements(backend string) []requirement {
	switch backend {
	case "netavark":
		return []requirement{
			{name: "netavark", pkg: "netavark", why: "podman's network backend", helper: true},
			{name: "iptables", pkg: "iptables", why: "netavark needs it to set up container networks and published ports"},
		}
	case "cni":
		var rs []requirement
		for _, p := range []string{"bridge", "portmap", "firewall", "host-local", "loopback", "tuning"} {
			rs = append(rs, requirement{name: p, pkg: "containernetworking-plugins", why: "podman's CNI network backend", cni: true})
		}
		return append(rs, requirement{name: "iptables", pkg: "iptables", why: "the CNI plugins need it to set up container networks and published ports"})
	}
	return nil
}

// hostCheckTimeout bounds the podman info a host check runs.
const hostCheckTimeout = 30 * time.Second

// CheckHost finds the programs Podman runs to start containers on this host
// — Podman itself, its OCI runtime, and what its network backend calls,
// looked up as Podman looks them up, in this process's PATH — and returns an
// error wrapping ErrHostPrerequisite that names each missing one, what needs
// it, and how to install it. It runs one `podman info`; call it at start and
// after a failure, not on every step.
func (p *Podman) CheckHost(ctx context.Context) error {
	return p.checkHost(ctx, os.Getenv("PATH"))
}

func (p *Podman) checkHost(ctx context.Context, pathEnv string) error {
	fix := "install it with `apt-get install %s` (scripts/install-prereqs.sh installs everything KAT needs), then restart kat-agent"
	if _, err := lookPathIn(p.cfg.Binary, pathEnv, nil); err != nil {
		return fmt.Errorf("%w: podman (%s) is not in PATH (%s): this node cannot run containers; "+fix,
			ErrHostPrerequisite, p.cfg.Binary, pathEnv, "podman")
	}
	ctx, cancel := context.WithTimeout(ctx, hostCheckTimeout)
	defer cancel()
	out, err := p.run(ctx, "info", "--format", "{{.Host.NetworkBackend}}\t{{.Host.OCIRuntime.Name}}\t{{.Host.OCIRuntime.Path}}")
	if err != nil {
		return fmt.Errorf("check podman: %w", err)
	}
	f := strings.Split(strings.TrimRight(string(out), "\r\n"), "\t")
	if len(f) != 3 {
		return fmt.Errorf("check podman: podman info printed %q", out)
	}
	backend, ociName, ociPath := f[0], f[1], f[2]
	var missing []string
	if ociPath == "" {
		missing = append(missing, fmt.Sprintf("%s (podman's OCI runtime) is not installed: "+fix, ociName, ociName))
	}
	for _, r := range hostRequirements(backend) {
		var dirs []string
		switch {
		case r.helper:
			dirs = PodmanHelperDirs
		case r.cni:
			dirs = cniPluginDirs
		}
		if _, err := lookPathIn(r.name, pathEnv, dirs); err == nil {
			continue
		}
		where := "in PATH (" + pathEnv + ")"
		if dirs != nil {
			where = "in " + strings.Join(dirs, ", ")
		}
		missing = append(missing, fmt.Sprintf("%s is not %s: %s; "+fix, r.name, where, r.why, r.pkg))
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrHostPrerequisite, strings.Join(missing, "; "))
}

// lookPathIn finds an executable: an absolute or relative path as given,
// else in dirs (when not nil), else in the directories of pathEnv.
func lookPathIn(name, pathEnv string, dirs []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, isExecutable(name)
	}
	if dirs == nil {
		dirs = filepath.SplitList(pathEnv)
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if isExecutable(p) == nil {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}

func isExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", path)
	}
	return nil
}

// hostPrerequisiteHint explains an error podman printed because a program it
// runs is missing, using CheckHost; it returns nil when stderr is not such an
// error.
func (p *Podman) hostPrerequisiteHint(stderr string) error {
	s := strings.ToLower(stderr)
	backend := strings.Contains(s, "netavark") || strings.Contains(s, "cni")
	if !backend || !strings.Contains(s, "no such file or directory") {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), hostCheckTimeout)
	defer cancel()
	if err := p.CheckHost(ctx); errors.Is(err, ErrHostPrerequisite) {
		return err
	}
	return fmt.Errorf("%w: podman's network backend could not run a program it needs; check that iptables and netavark are installed (scripts/install-prereqs.sh)", ErrHostPrerequisite)
}
