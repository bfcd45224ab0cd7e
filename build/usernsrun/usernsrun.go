package usernsrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/internal/mountinfo"
)

const (
	// wrapperName is the wrapper script Install writes, podman's --runtime.
	wrapperName = "kat-build-runtime"
	// helperName is the name this program runs under as the wrapper's
	// helper: a symbolic link to it beside the wrapper.
	helperName = "kat-build-userns"
	// envIDMap is the uid and gid map of RUN steps, "0:HOSTBASE:SIZE".
	envIDMap = "KAT_BUILD_IDMAP"
	// envRuntime is the path of the real OCI runtime.
	envRuntime = "KAT_BUILD_OCI_RUNTIME"
	// envOverlayHome is the overlay driver's directory, against which
	// relative layer paths in a mount's options are resolved.
	envOverlayHome = "KAT_BUILD_OVERLAY_HOME"
	// probeArg makes the helper print helperName: Check asks it.
	probeArg = "--kat-build-userns-probe"
	// wrapperDir (in the bundle) holds the wrapper's mount points; the
	// step's working directory for overlayfs is wrapperWork, beside the
	// layer's own.
	wrapperDir  = "kat"
	wrapperWork = "kat-work"
	// stateName (in the bundle) lists what the wrapper mounted, for
	// "delete".
	stateName = "kat-userns.json"
)

// Main runs this process as the helper of the wrapper when it was started
// as one (see Install), and exits; otherwise it returns at once. A program
// whose builds run RUN steps calls it first thing in main: the builder
// starts the program's own executable as the helper.
func Main() {
	if filepath.Base(os.Args[0]) != helperName {
		return
	}
	os.Exit(wrapRuntime(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Install writes the wrapper script DIR/kat-build-runtime, which podman
// runs as its OCI runtime (podman --runtime WRAPPER), and makes
// DIR/kat-build-userns a symbolic link to this program, the helper the
// script hands create and delete to (Main). It returns their paths.
func Install(dir string) (wrapper, helper string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", "", fmt.Errorf("usernsrun: find this program, the helper of the runtime wrapper of builds: %w", err)
	}
	helper = filepath.Join(dir, helperName)
	if err := os.Remove(helper); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", "", fmt.Errorf("usernsrun: replace %s: %w", helper, err)
	}
	if err := os.Symlink(exe, helper); err != nil {
		return "", "", fmt.Errorf("usernsrun: link the helper of the runtime wrapper of builds: %w", err)
	}
	wrapper = filepath.Join(dir, wrapperName)
	tmp := wrapper + ".tmp"
	if err := os.WriteFile(tmp, []byte(wrapperScript(helper)), 0o700); err != nil {
		return "", "", fmt.Errorf("usernsrun: write the runtime wrapper of builds: %w", err)
	}
	if err := os.Rename(tmp, wrapper); err != nil {
		return "", "", fmt.Errorf("usernsrun: write the runtime wrapper of builds: %w", err)
	}
	return wrapper, helper, nil
}

// Check makes sure helper (as Install returned it) serves as the helper:
// the program it links to calls Main first in main.
func Check(ctx context.Context, helper string) error {
	probe, err := exec.CommandContext(ctx, helper, probeArg).Output()
	if err == nil && strings.TrimSpace(string(probe)) != helperName {
		err = fmt.Errorf("it printed %q", probe)
	}
	if err != nil {
		return fmt.Errorf("%s does not serve as the helper of the runtime wrapper of builds (the program must call usernsrun.Main first in main): %w", helper, err)
	}
	return nil
}

// Env is the environment podman passes on to the wrapper for a build whose
// RUN steps run with container uids and gids 0 to size-1 mapped to host ids
// from hostBase, under the real OCI runtime ociRuntime, with Podman's
// overlay driver directory overlayHome (against which relative layer paths
// of a mount are resolved).
func Env(hostBase, size int64, ociRuntime, overlayHome string) []string {
	return []string{
		envIDMap + "=" + idMap{HostBase: hostBase, Size: size}.String(),
		envRuntime + "=" + ociRuntime,
		envOverlayHome + "=" + overlayHome,
	}
}

// wrapperScript is the wrapper: it runs helper for create and delete and
// the real runtime for the rest. Its parsing of the global flags matches
// runtimeCommand's.
func wrapperScript(helper string) string {
	return `#!/bin/sh
# Written by KAT (package usernsrun): podman runs the RUN steps of builds through
# this. create and delete go to KAT, which puts the step into a user
# namespace; the rest goes straight to the OCI runtime.
skip=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in
    --root|--log|--log-format|--criu) skip=1 ;;
    -*) ;;
    create|delete) exec ` + shellQuote(helper) + ` "$@" ;;
    *) break ;;
  esac
done
exec "${` + envRuntime + `:?is not set: only KAT builds run this}" "$@"
`
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// wrapRuntime is the helper's main; it returns the exit code.
func wrapRuntime(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == probeArg {
		fmt.Fprintln(stdout, helperName)
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", helperName, err)
		return 1
	}
	real := os.Getenv(envRuntime)
	if real == "" {
		return fail(fmt.Errorf("%s is not set: only KAT's builds run this program as their OCI runtime", envRuntime))
	}
	command, bundle := runtimeCommand(args)
	switch command {
	case "create":
		m, err := parseIDMapEnv(os.Getenv(envIDMap))
		if err != nil {
			return fail(err)
		}
		if err := enterUserNS(bundle, m, os.Getenv(envOverlayHome)); err != nil {
			return fail(fmt.Errorf("run the step in a user namespace: %w", err))
		}
	case "delete":
		// Podman runs delete in the bundle directory.
		cmd := exec.Command(real, args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		err := cmd.Run()
		if cerr := leaveUserNS("."); cerr != nil {
			fmt.Fprintf(stderr, "%s: warning: %v\n", helperName, cerr)
		}
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			return fail(err)
		}
		return 0
	}
	if err := syscall.Exec(real, append([]string{real}, args...), os.Environ()); err != nil {
		return fail(fmt.Errorf("run %s: %w", real, err))
	}
	return 0
}

// runtimeCommand finds the OCI runtime command in args (after the global
// flags) and, for create, its bundle directory (--bundle, default ".").
func runtimeCommand(args []string) (command, bundle string) {
	withValue := map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			command = a
			break
		}
		if withValue[a] {
			i++
		}
	}
	bundle = "."
	if command != "create" {
		return command, bundle
	}
	for j := i + 1; j < len(args); j++ {
		switch a := args[j]; {
		case (a == "--bundle" || a == "-b") && j+1 < len(args):
			return command, args[j+1]
		case strings.HasPrefix(a, "--bundle="):
			return command, strings.TrimPrefix(a, "--bundle=")
		}
	}
	return command, bundle
}

// idMap is one contiguous uid and gid map from container id 0.
type idMap struct {
	HostBase, Size int64
}

func (m idMap) String() string { return fmt.Sprintf("0:%d:%d", m.HostBase, m.Size) }

// parseIDMapEnv parses the envIDMap value.
func parseIDMapEnv(v string) (idMap, error) {
	parts := strings.Split(v, ":")
	if len(parts) == 3 && parts[0] == "0" {
		base, err1 := strconv.ParseInt(parts[1], 10, 64)
		size, err2 := strconv.ParseInt(parts[2], 10, 64)
		if err1 == nil && err2 == nil && base > 0 && size > 0 && base+size <= 1<<32-1 {
			return idMap{HostBase: base, Size: size}, nil
		}
	}
	return idMap{}, fmt.Errorf("%s=%q: want 0:HOSTID:SIZE with a host id above 0", envIDMap, v)
}

// overlayMount is what the wrapper needs of the overlay mount of a step's
// root filesystem.
type overlayMount struct {
	lowers []string // uppermost first
	upper  string
	work   string
	// options are the other mount options, to mount the same way.
	options []string
}

// findOverlay returns the overlay mounted at mountPoint according to a
// /proc/self/mountinfo, resolving relative layer paths against home.
func findOverlay(table io.Reader, mountPoint, home string) (overlayMount, error) {
	var found []string
	sc := bufio.NewScanner(table)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || mountinfo.Unescape(f[4]) != mountPoint {
			continue
		}
		found = f // the last one is on top
	}
	if err := sc.Err(); err != nil {
		return overlayMount{}, fmt.Errorf("read mountinfo: %w", err)
	}
	if found == nil {
		return overlayMount{}, fmt.Errorf("nothing is mounted at %s", mountPoint)
	}
	sep := -1
	for i, x := range found {
		if x == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+3 >= len(found) {
		return overlayMount{}, fmt.Errorf("mountinfo line of %s has no file system fields", mountPoint)
	}
	if found[sep+1] != "overlay" {
		return overlayMount{}, fmt.Errorf("%s is a %s mount, not overlay: builds need Podman's overlay storage driver", mountPoint, found[sep+1])
	}
	var m overlayMount
	abs := func(p string) (string, error) {
		if filepath.IsAbs(p) {
			return p, nil
		}
		if home == "" {
			return "", fmt.Errorf("layer path %q of %s is relative, and %s is not set", p, mountPoint, envOverlayHome)
		}
		return filepath.Join(home, p), nil
	}
	for _, opt := range strings.Split(found[sep+3], ",") {
		key, val, hasVal := strings.Cut(opt, "=")
		val = mountinfo.Unescape(val)
		var err error
		switch key {
		case "rw", "ro", "":
		case "lowerdir", "lowerdir+":
			for l := range strings.SplitSeq(val, ":") {
				if l == "" {
					return overlayMount{}, fmt.Errorf("overlay at %s has data-only layers, which the wrapper does not handle", mountPoint)
				}
				if l, err = abs(l); err != nil {
					return overlayMount{}, err
				}
				m.lowers = append(m.lowers, l)
			}
		case "upperdir":
			m.upper, err = abs(val)
		case "workdir":
			m.work, err = abs(val)
		case "datadir+":
			return overlayMount{}, fmt.Errorf("overlay at %s has data-only layers, which the wrapper does not handle", mountPoint)
		default:
			if hasVal {
				key += "=" + val
			}
			m.options = append(m.options, key)
		}
		if err != nil {
			return overlayMount{}, err
		}
	}
	switch {
	case len(m.lowers) == 0 || m.upper == "" || m.work == "":
		return overlayMount{}, fmt.Errorf("overlay at %s lacks a lower, upper or work directory", mountPoint)
	case filepath.Dir(m.upper) != filepath.Dir(m.work):
		return overlayMount{}, fmt.Errorf("overlay at %s: upper %s and work %s are not in one layer directory", mountPoint, m.upper, m.work)
	}
	return m, nil
}

// wrapperState is what enterUserNS mounted and made, for leaveUserNS.
type wrapperState struct {
	// Mounts are unmounted in order.
	Mounts []string `json:"mounts"`
	// Remove are removed (recursively) after the mounts.
	Remove []string `json:"remove"`
	// Upper is the step's upper layer directory, and WhiteoutOwner the
	// host id overlayfs' own files (whiteouts) got in it.
	Upper         string `json:"upper"`
	WhiteoutOwner int64  `json:"whiteoutOwner"`
}

// enterUserNS prepares the container of the bundle to run in a user
// namespace with map m: it mounts its root filesystem again with idmapped
// layers and rewrites its config.json. On failure it undoes its mounts.
func enterUserNS(bundle string, m idMap, home string) (err error) {
	bundle, err = filepath.Abs(bundle)
	if err != nil {
		return fmt.Errorf("find the bundle: %w", err)
	}
	cfgPath := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return fmt.Errorf("read the container config: %w", err)
	}
	spec, root, err := decodeSpec(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", cfgPath, err)
	}
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	ov, err := findOverlay(mi, root, home)
	mi.Close()
	if err != nil {
		return err
	}

	st := wrapperState{Upper: ov.upper, WhiteoutOwner: m.Size}
	defer func() {
		if err != nil {
			_ = undo(st)
		}
	}()
	dir := filepath.Join(bundle, wrapperDir)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	st.Remove = append(st.Remove, dir)
	// The ids of the container, and one more for overlayfs, which does
	// its own work (its work directory, whiteouts) as the mounter, host
	// root: through an idmapped layer it must map to some id. It maps to
	// the first id above the container's, which the container never
	// writes as.
	ns, release, err := holdUserNS(m.HostBase, m.Size)
	if err != nil {
		return err
	}
	defer release()
	lowers := make([]string, len(ov.lowers))
	for i, l := range ov.lowers {
		lowers[i] = strconv.Itoa(i)
		if err := idmapMount(ns, l, filepath.Join(dir, lowers[i])); err != nil {
			return err
		}
		st.Mounts = append([]string{filepath.Join(dir, lowers[i])}, st.Mounts...)
	}
	layer := filepath.Dir(ov.upper)
	work := filepath.Join(layer, wrapperWork)
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("clear %s: %w", work, err)
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", work, err)
	}
	st.Remove = append(st.Remove, work)
	if err := idmapMount(ns, layer, filepath.Join(dir, "u")); err != nil {
		return err
	}
	st.Mounts = append([]string{filepath.Join(dir, "u")}, st.Mounts...)
	rootfs := filepath.Join(dir, "root")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", rootfs, err)
	}
	// Relative paths keep the options within a page with many layers.
	opts := append([]string{
		"lowerdir=" + strings.Join(lowers, ":"),
		"upperdir=" + filepath.Join("u", filepath.Base(ov.upper)),
		"workdir=" + filepath.Join("u", wrapperWork),
	}, ov.options...)
	if err := mountIn(dir, "overlay", "root", "overlay", strings.Join(opts, ",")); err != nil {
		return fmt.Errorf("mount the idmapped overlay: %w", err)
	}
	st.Mounts = append([]string{rootfs}, st.Mounts...)
	if err := writeJSON(filepath.Join(bundle, stateName), st); err != nil {
		return err
	}
	out, err := encodeSpec(spec, rootfs, m)
	if err != nil {
		return fmt.Errorf("%s: %w", cfgPath, err)
	}
	if err := writeFileAtomic(cfgPath, out); err != nil {
		return err
	}
	return nil
}

// decodeSpec decodes an OCI runtime config, keeping every field, and
// returns its root path. A config that has a user namespace already is
// refused: the wrapper would not know the ids of its files.
func decodeSpec(raw []byte) (map[string]any, string, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var spec map[string]any
	if err := d.Decode(&spec); err != nil {
		return nil, "", fmt.Errorf("decode: %w", err)
	}
	r, _ := spec["root"].(map[string]any)
	root, _ := r["path"].(string)
	if root == "" {
		return nil, "", errors.New("no root.path")
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		return nil, "", errors.New("no linux section")
	}
	if linux["uidMappings"] != nil || linux["gidMappings"] != nil {
		return nil, "", errors.New("the container has uid mappings already (podman build must run with --userns host)")
	}
	nss, _ := linux["namespaces"].([]any)
	for _, n := range nss {
		if ns, _ := n.(map[string]any); ns["type"] == "user" {
			return nil, "", errors.New("the container has a user namespace already (podman build must run with --userns host)")
		}
	}
	return spec, root, nil
}

// encodeSpec points spec at rootfs and gives it a user namespace with m.
func encodeSpec(spec map[string]any, rootfs string, m idMap) ([]byte, error) {
	spec["root"].(map[string]any)["path"] = rootfs
	linux := spec["linux"].(map[string]any)
	nss, _ := linux["namespaces"].([]any)
	linux["namespaces"] = append(nss, map[string]any{"type": "user"})
	mapping := []map[string]any{{"containerID": 0, "hostID": m.HostBase, "size": m.Size}}
	linux["uidMappings"], linux["gidMappings"] = mapping, mapping
	out, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return out, nil
}

// holdUserNS starts a process in a new user namespace where ids 0..size-1
// are host ids base.. and id size is host root, and returns that
// namespace. release ends the process, a shell that waits for the end of
// its input (it starts faster than this program).
func holdUserNS(base, size int64) (ns *os.File, release func(), err error) {
	maps := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(size)}, {ContainerID: int(size), HostID: 0, Size: 1}}
	cmd := exec.Command("/bin/sh", "-c", "read -r _")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: maps, GidMappings: maps}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("start the user namespace: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start the user namespace: %w", err)
	}
	stop := func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	ns, err = os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		_ = cmd.Process.Kill()
		stop()
		return nil, nil, fmt.Errorf("open the user namespace: %w", err)
	}
	return ns, func() { ns.Close(); stop() }, nil
}

// idmapMount mounts src at dst (created) with the ids of user namespace ns:
// a file of host uid u there is owned by uid u in ns.
func idmapMount(ns *os.File, src, dst string) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("idmap %s: open_tree: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		return fmt.Errorf("idmap %s: mount_setattr: %w (idmapped mounts need Linux 5.12, idmapped overlay layers 5.19)", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap %s: move_mount to %s: %w", src, dst, err)
	}
	return nil
}

// mountIn mounts with relative paths resolved in dir.
func mountIn(dir, source, target, fstype, data string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	err = unix.Mount(source, target, fstype, 0, data)
	if cerr := os.Chdir(wd); err == nil {
		err = cerr
	}
	return err
}

// leaveUserNS undoes what enterUserNS did for the bundle, once the
// container is deleted. A bundle it did nothing in is left alone.
func leaveUserNS(bundle string) error {
	raw, err := os.ReadFile(filepath.Join(bundle, stateName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the wrapper's state: %w", err)
	}
	var st wrapperState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("read the wrapper's state: %w", err)
	}
	err = giveWhiteoutsToRoot(st.Upper, st.WhiteoutOwner)
	if uerr := undo(st); uerr != nil {
		err = errors.Join(err, uerr)
	}
	if rerr := os.Remove(filepath.Join(bundle, stateName)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// undo unmounts and removes what st lists.
func undo(st wrapperState) error {
	var errs []error
	for _, m := range st.Mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	for _, d := range st.Remove {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// giveWhiteoutsToRoot chowns the whiteouts overlayfs made in the upper
// layer directory (as the mounter: they got host id owner there) to root,
// as overlayfs' whiteouts are elsewhere: the layer's tar then carries no
// trace of the wrapper.
func giveWhiteoutsToRoot(upper string, owner int64) error {
	if upper == "" {
		return nil
	}
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeCharDevice == 0 {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("whiteout %s: %w", p, err)
		}
		if st.Rdev == 0 && int64(st.Uid) == owner {
			if err := unix.Lchown(p, 0, 0); err != nil {
				return fmt.Errorf("whiteout %s: %w", p, err)
			}
		}
		return nil
	})
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, b)
}

// writeFileAtomic writes path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
