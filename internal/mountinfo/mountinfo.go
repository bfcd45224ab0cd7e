// Package mountinfo reads /proc/self/mountinfo: the escaping of its paths,
// and the mount points below a directory, which a cleanup detaches before it
// removes the directory (Podman's overlay and shm mounts of a storage root).
//
//	points, err := mountinfo.Below("/var/tmp/kat/node1")
//	err = mountinfo.UnmountBelow("/var/tmp/kat/node1")
package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Path is the mount table of this process's mount namespace.
const Path = "/proc/self/mountinfo"

// Unescape undoes the octal escapes (\040 for a space, ...) of the paths
// and options in /proc/self/mountinfo.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// PointsBelow returns the mount points of a mountinfo table that are dir or
// below it, unescaped, deepest first.
func PointsBelow(table io.Reader, dir string) ([]string, error) {
	var points []string
	sc := bufio.NewScanner(table)
	// An overlay's line lists every layer: far longer than bufio's default.
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		if p := Unescape(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	// Deepest first; for one point mounted twice, the later mount first.
	slices.Reverse(points)
	slices.SortStableFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return points, nil
}

// Below returns the mount points of this process's mount namespace that are
// dir or below it, deepest first.
func Below(dir string) ([]string, error) {
	f, err := os.Open(Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return PointsBelow(f, dir)
}

// UnmountBelow detaches (MNT_DETACH) every mount at or below dir, deepest
// first, so that removing dir afterwards never reaches into a mounted file
// system. A point no longer mounted is no error.
func UnmountBelow(dir string) error {
	points, err := Below(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
