package runtime

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

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
		return fmt.Errorf("%w: unknown ensureType %q", ErrInvalidSpec, v.Ensure)
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
