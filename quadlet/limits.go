package quadlet

import (
	"fmt"
	"maps"
	"slices"
)

// Default limits on a workload directory or archive.
const (
	defaultMaxFiles      = 32
	defaultMaxFileBytes  = 256 << 10
	defaultMaxTotalBytes = 1 << 20
)

// Limits bounds what ReadDir and ReadArchive accept. A zero field means the
// matching field of DefaultLimits.
type Limits struct {
	// MaxFiles is the most .kat files. Default 32.
	MaxFiles int
	// MaxFileBytes is the largest size of one file. Default 256 KiB.
	MaxFileBytes int64
	// MaxTotalBytes is the largest size of all files together. Default
	// 1 MiB.
	MaxTotalBytes int64
}

// DefaultLimits are the limits used by LoadDir and LoadArchive. Treat it as
// a constant.
var DefaultLimits = Limits{MaxFiles: defaultMaxFiles, MaxFileBytes: defaultMaxFileBytes, MaxTotalBytes: defaultMaxTotalBytes}

// withDefaults fills zero (or negative) fields with the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = defaultMaxFiles
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = defaultMaxFileBytes
	}
	if l.MaxTotalBytes <= 0 {
		l.MaxTotalBytes = defaultMaxTotalBytes
	}
	return l
}

// Check reports, wrapping ErrTooLarge, whether files exceed the limits. It
// is for callers that gather files themselves, such as from a Git tree.
func (l Limits) Check(files map[string][]byte) error {
	l = l.withDefaults()
	if len(files) > l.MaxFiles {
		return fmt.Errorf("check quadlet files: %d files, more than the limit of %d: %w", len(files), l.MaxFiles, ErrTooLarge)
	}
	var total int64
	for _, name := range slices.Sorted(maps.Keys(files)) {
		n := int64(len(files[name]))
		if n > l.MaxFileBytes {
			return fmt.Errorf("check quadlet files: %s: %d bytes, more than the limit of %d: %w", name, n, l.MaxFileBytes, ErrTooLarge)
		}
		total += n
	}
	if total > l.MaxTotalBytes {
		return fmt.Errorf("check quadlet files: %d bytes in all, more than the limit of %d: %w", total, l.MaxTotalBytes, ErrTooLarge)
	}
	return nil
}
