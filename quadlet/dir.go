package quadlet

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// ReadDir reads the .kat files directly in dir, keyed by base name, without
// parsing them.
//
// Hidden entries (names starting with '.', such as .git or .gitkeep) and
// editor backups (names ending in '~') are skipped. Every other entry must be
// a regular .kat file: sub-directories, symbolic links, devices, FIFOs,
// sockets and other files are refused with an error naming the entry.
// Exceeding lim wraps ErrTooLarge. A directory without .kat files is an
// error.
func ReadDir(dir string, lim Limits) (map[string][]byte, error) {
	lim = lim.withDefaults()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read quadlet dir: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("read quadlet dir: %w", err)
	}
	defer root.Close()
	files := map[string][]byte{}
	var total int64
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("read quadlet dir %s: %s: %s", dir, name, fmt.Sprintf(format, args...))
		}
		switch t := e.Type(); {
		case t.IsDir():
			return nil, fail("is a directory; a workload directory holds only .kat files")
		case t&os.ModeSymlink != 0:
			return nil, fail("is a symbolic link; links are not followed")
		case !t.IsRegular():
			return nil, fail("is not a regular file")
		case path.Ext(name) != ".kat":
			return nil, fail("%s", FileNameProblem(name))
		}
		if len(files) == lim.MaxFiles {
			return nil, fmt.Errorf("read quadlet dir %s: more than %d .kat files: %w", dir, lim.MaxFiles, ErrTooLarge)
		}
		data, err := readRegular(root, name, lim.MaxFileBytes)
		if err != nil {
			return nil, fmt.Errorf("read quadlet dir %s: %w", dir, err)
		}
		total += int64(len(data))
		if total > lim.MaxTotalBytes {
			return nil, fmt.Errorf("read quadlet dir %s: files hold more than %d bytes: %w", dir, lim.MaxTotalBytes, ErrTooLarge)
		}
		files[name] = data
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("read quadlet dir %s: no .kat files", dir)
	}
	return files, nil
}

// readRegular reads a regular file of at most limit bytes from root.
func readRegular(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: is not a regular file", name)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the limit of %d: %w", name, fi.Size(), limit, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: more than the limit of %d bytes: %w", name, limit, ErrTooLarge)
	}
	return data, nil
}

// LoadDir reads dir with DefaultLimits and parses it with ParseWorkload.
func LoadDir(dir string, opts ParseOptions) (*Quadlet, error) {
	files, err := ReadDir(dir, DefaultLimits)
	if err != nil {
		return nil, err
	}
	return ParseWorkload(files, opts)
}
