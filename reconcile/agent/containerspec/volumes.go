package containerspec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// ErrVolumeNotReady means a volume's host path is missing or of the wrong
// type: the node, not the spec, must change (or PrepareVolumes create it).
var ErrVolumeNotReady = errors.New("containerspec: volume not ready")

// Host path kinds of HostMount.EnsureType.
const (
	EnsureNone              = ""
	EnsureDirectoryOrCreate = "DirectoryOrCreate"
	EnsureDirectory         = "Directory"
	EnsureFileOrCreate      = "FileOrCreate"
	EnsureFile              = "File"
	EnsureSocket            = "Socket"
)

// VolumePath is the host side of one volume of an instance: where it lives
// and what must be true of it before the container starts.
type VolumePath struct {
	// Name is the volume's name in the workload.
	Name string
	// Path is the host path of the volume's root.
	Path string
	// Ensure is the check or creation PrepareVolumes performs: an Ensure*
	// value. SimpleClusterStorage is EnsureDirectoryOrCreate.
	Ensure string
	// ClusterStorage marks a SimpleClusterStorage volume, which is
	// chowned to the container's root user when mounted.
	ClusterStorage bool
	// Secret marks a secret volume, always mounted read-only; the agent
	// writes it (Path is in its tmpfs), PrepareVolumes leaves it alone.
	Secret bool
	// SubPaths are the volume's sub-paths mounted by the container,
	// relative to Path; PrepareVolumes creates them as directories.
	SubPaths []string
}

// SimpleClusterStoragePath is where a SimpleClusterStorage volume lives on
// a node: {volumeBasePath}/{namespace}/{workload}/{volume}. Every instance of
// the workload on the node shares it.
func SimpleClusterStoragePath(volumeBasePath, namespace, workload, volume string) string {
	return filepath.Join(volumeBasePath, namespace, workload, volume)
}

// VolumePaths returns the host side of every volume of q for inst, in the
// order of spec.volumes. It touches nothing.
func VolumePaths(q *quadlet.Quadlet, inst Instance) ([]VolumePath, error) {
	spec := &q.Workload.Spec
	where := q.Namespace() + "/" + q.Name()
	var vols []VolumePath
	for i, v := range spec.Volumes {
		field := fmt.Sprintf("spec.volumes[%d]", i)
		vp := VolumePath{Name: v.Name}
		switch {
		case v.SimpleClusterStorage != nil:
			if inst.VolumeBasePath == "" || !filepath.IsAbs(inst.VolumeBasePath) {
				return nil, fmt.Errorf("%w: workload %s: %s: simpleClusterStorage needs the agent's volumeBasePath, an absolute path (got %q)",
					runtime.ErrInvalidSpec, where, field, inst.VolumeBasePath)
			}
			vp.Path = SimpleClusterStoragePath(inst.VolumeBasePath, q.Namespace(), q.Name(), v.Name)
			vp.Ensure = EnsureDirectoryOrCreate
			vp.ClusterStorage = true
		case v.HostMount != nil:
			if !filepath.IsAbs(v.HostMount.HostPath) {
				return nil, fmt.Errorf("%w: workload %s: %s.hostMount.hostPath: %q is not an absolute path",
					runtime.ErrInvalidSpec, where, field, v.HostMount.HostPath)
			}
			vp.Path = filepath.Clean(v.HostMount.HostPath)
			switch t := v.HostMount.EnsureType; t {
			case EnsureNone, EnsureDirectoryOrCreate, EnsureDirectory, EnsureFileOrCreate, EnsureFile, EnsureSocket:
				vp.Ensure = t
			default:
				return nil, fmt.Errorf("%w: workload %s: %s.hostMount.ensureType: %q is not one of DirectoryOrCreate, Directory, FileOrCreate, File, Socket",
					runtime.ErrInvalidSpec, where, field, t)
			}
		case v.Secret != nil:
			if inst.Secrets == nil {
				return nil, fmt.Errorf("%w: workload %s: %s.secret: the agent holds no secrets for instance %s", runtime.ErrInvalidSpec, where, field, inst.ID)
			}
			vp.Path, vp.Secret = inst.Secrets.VolumeDir(v.Name), true
		default:
			return nil, fmt.Errorf("%w: workload %s: %s: neither simpleClusterStorage, hostMount nor secret is set", runtime.ErrInvalidSpec, where, field)
		}
		vols = append(vols, vp)
	}
	for i, m := range spec.Container.VolumeMounts {
		if m.SubPath == "" {
			continue
		}
		field := fmt.Sprintf("spec.container.volumeMounts[%d].subPath", i)
		sub, err := cleanSubPath(m.SubPath)
		if err != nil {
			return nil, fmt.Errorf("%w: workload %s: %s: %w", runtime.ErrInvalidSpec, where, field, err)
		}
		vp := findVolume(vols, m.Name)
		if vp == nil {
			return nil, fmt.Errorf("%w: workload %s: spec.container.volumeMounts[%d].name: volume %q is not defined in spec.volumes",
				runtime.ErrInvalidSpec, where, i, m.Name)
		}
		switch vp.Ensure {
		case EnsureFile, EnsureFileOrCreate, EnsureSocket:
			return nil, fmt.Errorf("%w: workload %s: %s: volume %q is a %s, which has no sub-paths",
				runtime.ErrInvalidSpec, where, field, m.Name, strings.ToLower(vp.Ensure))
		}
		vp.SubPaths = append(vp.SubPaths, sub)
	}
	return vols, nil
}

func findVolume(vols []VolumePath, name string) *VolumePath {
	for i := range vols {
		if vols[i].Name == name {
			return &vols[i]
		}
	}
	return nil
}

// cleanSubPath checks a relative sub-path that stays inside its volume.
func cleanSubPath(s string) (string, error) {
	if filepath.IsAbs(s) {
		return "", fmt.Errorf("%q must be a relative path", s)
	}
	c := filepath.Clean(s)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("%q must name a path inside the volume", s)
	}
	return c, nil
}

// PrepareVolumes makes the host side of vols ready for a container, as
// docs/quadlet-reference.md describes the volumes: it creates SimpleClusterStorage directories, checks or
// creates HostMount paths according to their ensureType, and creates
// sub-paths as directories. Sub-paths must not pass through a symbolic link
// (a container could plant one to reach outside its volume). Errors name the
// volume and the path, and wrap ErrVolumeNotReady when the host is not as
// required. It is idempotent.
func PrepareVolumes(vols []VolumePath) error {
	for _, v := range vols {
		if err := prepareVolume(v); err != nil {
			return fmt.Errorf("prepare volume %q at %s: %w", v.Name, v.Path, err)
		}
	}
	return nil
}

func prepareVolume(v VolumePath) error {
	fi, err := os.Stat(v.Path)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return fmt.Errorf("%w: %w", ErrVolumeNotReady, err)
	}
	switch v.Ensure {
	case EnsureNone:
		// No check, as the spec says; podman reports a missing path.
	case EnsureDirectoryOrCreate:
		if missing {
			if err := os.MkdirAll(v.Path, 0o755); err != nil {
				return fmt.Errorf("create directory: %w", err)
			}
		} else if !fi.IsDir() {
			return fmt.Errorf("%w: ensureType %s: exists but is not a directory", ErrVolumeNotReady, v.Ensure)
		}
	case EnsureDirectory:
		if missing || !fi.IsDir() {
			return fmt.Errorf("%w: ensureType %s: %s", ErrVolumeNotReady, v.Ensure, notA(missing, "directory"))
		}
	case EnsureFileOrCreate:
		if missing {
			if err := os.MkdirAll(filepath.Dir(v.Path), 0o755); err != nil {
				return fmt.Errorf("create parent directory: %w", err)
			}
			f, err := os.OpenFile(v.Path, os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				return fmt.Errorf("create file: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("create file: %w", err)
			}
		} else if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: ensureType %s: exists but is not a regular file", ErrVolumeNotReady, v.Ensure)
		}
	case EnsureFile:
		if missing || !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: ensureType %s: %s", ErrVolumeNotReady, v.Ensure, notA(missing, "regular file"))
		}
	case EnsureSocket:
		if missing || fi.Mode().Type() != fs.ModeSocket {
			return fmt.Errorf("%w: ensureType %s: %s", ErrVolumeNotReady, v.Ensure, notA(missing, "unix socket"))
		}
	default:
		return fmt.Errorf("%w: unknown ensureType %q", runtime.ErrInvalidSpec, v.Ensure)
	}
	for _, sub := range v.SubPaths {
		if err := makeSubPath(v.Path, sub); err != nil {
			return fmt.Errorf("sub-path %q: %w", sub, err)
		}
	}
	return nil
}

func notA(missing bool, what string) string {
	if missing {
		return "does not exist"
	}
	return "exists but is not a " + what
}

// makeSubPath creates root/sub as directories, one element at a time,
// refusing any element that is a symbolic link or not a directory.
func makeSubPath(root, sub string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrVolumeNotReady, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: the volume is not a directory", ErrVolumeNotReady)
	}
	cur := root
	for _, elem := range strings.Split(filepath.Clean(sub), string(filepath.Separator)) {
		cur = filepath.Join(cur, elem)
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(cur, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create %s: %w", cur, err)
			}
		case err != nil:
			return fmt.Errorf("%w: %w", ErrVolumeNotReady, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: %s is a symbolic link, refused", ErrVolumeNotReady, cur)
		case !fi.IsDir() && cur != filepath.Join(root, sub):
			return fmt.Errorf("%w: %s is not a directory", ErrVolumeNotReady, cur)
		}
	}
	return nil
}
