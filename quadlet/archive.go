package quadlet

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// ErrInvalidArchive is wrapped by ReadArchive when the archive is corrupt or
// holds an entry it refuses.
var ErrInvalidArchive = errors.New("quadlet: invalid archive")

// Decompressed bytes allowed beyond the file contents: tar headers, padding,
// PAX records and the end-of-archive blocks.
const (
	archiveOverheadPerEntry = 4 << 10
	archiveOverheadFixed    = 64 << 10
)

// errBudget is returned by budgetReader when its budget is spent.
var errBudget = errors.New("budget spent")

// budgetReader fails once more than n bytes have been read through it.
type budgetReader struct {
	r io.Reader
	n int64 // bytes still allowed
}

// Read reads at most one byte past the budget, then fails with errBudget.
func (b *budgetReader) Read(p []byte) (int, error) {
	if b.n < 0 {
		return 0, errBudget
	}
	if int64(len(p)) > b.n+1 {
		p = p[:b.n+1]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if b.n < 0 {
		return n, errBudget
	}
	return n, err
}

// ReadArchive reads a gzip-compressed tar archive of a workload directory,
// returning its files keyed by base name without parsing them.
//
// Only regular .kat files at the root of the archive ("workload.kat" or
// "./workload.kat") and the root directory entry ("./") are accepted.
// Absolute names, ".." elements, nested paths, sub-directories, symbolic and
// hard links, devices, FIFOs, other entry types, non-.kat names and duplicate
// names are refused with an error naming the entry and wrapping
// ErrInvalidArchive. The limits apply to the decompressed bytes as they are
// read, so a compression bomb is cut off just past the limit; exceeding them
// wraps ErrTooLarge. Input that is not gzip, a corrupt archive and an
// archive without files are errors wrapping ErrInvalidArchive.
func ReadArchive(r io.Reader, lim Limits) (map[string][]byte, error) {
	lim = lim.withDefaults()
	budget := lim.MaxTotalBytes + int64(lim.MaxFiles+2)*archiveOverheadPerEntry + archiveOverheadFixed
	compressed := bufio.NewReader(&budgetReader{r: r, n: budget + budget/64 + archiveOverheadFixed})
	files, err := readArchive(compressed, lim, budget)
	if errors.Is(err, errBudget) {
		return nil, fmt.Errorf("read quadlet archive: more than %d bytes: %w", budget, ErrTooLarge)
	}
	return files, err
}

func readArchive(compressed *bufio.Reader, lim Limits, budget int64) (map[string][]byte, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("read quadlet archive: %s: %w", fmt.Sprintf(format, args...), ErrInvalidArchive)
	}
	corrupt := func(err error) error {
		if errors.Is(err, errBudget) {
			return err
		}
		return invalid("corrupt archive: %v", err)
	}
	gz, err := gzip.NewReader(compressed)
	switch {
	case errors.Is(err, errBudget):
		return nil, err
	case errors.Is(err, io.EOF):
		return nil, invalid("empty input, not a gzip stream")
	case err != nil:
		return nil, invalid("not a gzip stream: %v", err)
	}
	gz.Multistream(false)
	decompressed := &budgetReader{r: gz, n: budget}
	tr := tar.NewReader(decompressed)
	files := map[string][]byte{}
	var total int64
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, corrupt(err)
		}
		entries++
		if entries > lim.MaxFiles+2 {
			return nil, fmt.Errorf("read quadlet archive: more than %d entries: %w", lim.MaxFiles+2, ErrTooLarge)
		}
		name, err := archiveEntryName(hdr)
		if err != nil {
			return nil, invalid("entry %q: %v", hdr.Name, err)
		}
		if name == "" {
			continue // the root directory
		}
		if _, dup := files[name]; dup {
			return nil, invalid("entry %q: %s appears more than once", hdr.Name, name)
		}
		if len(files) == lim.MaxFiles {
			return nil, fmt.Errorf("read quadlet archive: more than %d files: %w", lim.MaxFiles, ErrTooLarge)
		}
		if hdr.Size > lim.MaxFileBytes {
			return nil, fmt.Errorf("read quadlet archive: entry %q: %d bytes, more than the limit of %d: %w", hdr.Name, hdr.Size, lim.MaxFileBytes, ErrTooLarge)
		}
		data, err := io.ReadAll(io.LimitReader(tr, lim.MaxFileBytes+1))
		if err != nil {
			return nil, corrupt(err)
		}
		if int64(len(data)) > lim.MaxFileBytes {
			return nil, fmt.Errorf("read quadlet archive: entry %q: more than %d bytes: %w", hdr.Name, lim.MaxFileBytes, ErrTooLarge)
		}
		total += int64(len(data))
		if total > lim.MaxTotalBytes {
			return nil, fmt.Errorf("read quadlet archive: files hold more than %d bytes: %w", lim.MaxTotalBytes, ErrTooLarge)
		}
		files[name] = data
	}
	// Read the rest of the gzip stream, still within the budget, so that
	// its checksum is verified, then make sure nothing follows it.
	if _, err := io.Copy(io.Discard, decompressed); err != nil {
		return nil, corrupt(err)
	}
	if _, err := compressed.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, corrupt(err)
		}
		return nil, invalid("unexpected data after the gzip stream")
	}
	if len(files) == 0 {
		return nil, invalid("archive holds no .kat files")
	}
	return files, nil
}

// archiveEntryName checks a tar entry and returns its base name, or "" for
// the root directory entry.
func archiveEntryName(hdr *tar.Header) (string, error) {
	name := hdr.Name
	switch {
	case name == "":
		return "", errors.New("empty name")
	case strings.HasPrefix(name, "/") || strings.HasPrefix(name, "\\"):
		return "", errors.New("absolute paths are not allowed")
	case slices.Contains(strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }), ".."):
		return "", errors.New("\"..\" is not allowed in names")
	}
	base := strings.TrimPrefix(name, "./")
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeDir:
		if base == "" || name == "." {
			return "", nil
		}
		return "", errors.New("sub-directories are not allowed")
	case tar.TypeSymlink:
		return "", errors.New("symbolic links are not allowed")
	case tar.TypeLink:
		return "", errors.New("hard links are not allowed")
	case tar.TypeChar, tar.TypeBlock:
		return "", errors.New("device files are not allowed")
	case tar.TypeFifo:
		return "", errors.New("FIFOs are not allowed")
	default:
		return "", fmt.Errorf("entry type %q is not allowed", hdr.Typeflag)
	}
	if msg := FileNameProblem(base); msg != "" {
		if strings.ContainsAny(base, "/\\") {
			return "", errors.New("files must be at the root of the archive")
		}
		return "", errors.New(strings.TrimPrefix(msg, "is "))
	}
	return base, nil
}

// WriteArchive writes files as a gzip-compressed tar archive that
// ReadArchive accepts. The output depends only on the files: names are
// sorted, modification times are zero, modes are 0644 and owners empty.
// Names must be base names ending in ".kat".
func WriteArchive(w io.Writer, files map[string][]byte) error {
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		if msg := FileNameProblem(name); msg != "" {
			return fmt.Errorf("write quadlet archive: %s: %s", name, msg)
		}
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for _, name := range names {
		data := files[name]
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Mode:     0o644,
			Size:     int64(len(data)),
			ModTime:  time.Unix(0, 0),
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write quadlet archive: %s: %w", name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("write quadlet archive: %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write quadlet archive: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("write quadlet archive: %w", err)
	}
	return nil
}

// LoadArchive reads r with ReadArchive and DefaultLimits and parses it with
// ParseWorkload.
func LoadArchive(r io.Reader, opts ParseOptions) (*Quadlet, error) {
	files, err := ReadArchive(r, DefaultLimits)
	if err != nil {
		return nil, err
	}
	return ParseWorkload(files, opts)
}
