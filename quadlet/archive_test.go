package quadlet

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// entry is one tar entry for makeArchive.
type entry struct {
	hdr  tar.Header
	data []byte
}

func file(name, content string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}, data: []byte(content)}
}

func special(name string, typ byte, link string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: link, Mode: 0o644}}
}

// makeArchive builds a tar.gz from entries exactly as given.
func makeArchive(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipZeros returns a valid gzip stream of prefix followed by n zero bytes
// (n a multiple of 1 MiB, at least 2 MiB) without compressing all of them:
// once the window holds only zeros, every further MiB of zeros compresses to
// the same self-contained deflate blocks, which are repeated.
func gzipZeros(t testing.TB, prefix []byte, n int64) []byte {
	t.Helper()
	const chunk = 1 << 20
	zeros := make([]byte, chunk)
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	write := func(p []byte) {
		if _, err := gz.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := gz.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(prefix)
	write(zeros)
	head := bytes.Clone(buf.Bytes())
	write(zeros)
	repeat := bytes.Clone(buf.Bytes()[len(head):])
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	tail := buf.Bytes()[len(head)+len(repeat):]
	end := tail[:len(tail)-8] // the final block, without the gzip trailer

	out := bytes.NewBuffer(head)
	crc := crc32.ChecksumIEEE(prefix)
	crc = crc32.Update(crc, crc32.IEEETable, zeros)
	for i := int64(1); i < n/chunk; i++ {
		out.Write(repeat)
		crc = crc32.Update(crc, crc32.IEEETable, zeros)
	}
	out.Write(end)
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[:4], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(int64(len(prefix))+n))
	out.Write(trailer[:])
	return out.Bytes()
}

// bomb is a gzip stream of n zero bytes, inside a tar entry when name is
// set.
func bomb(t testing.TB, name string, n int64) []byte {
	t.Helper()
	if name == "" {
		return gzipZeros(t, nil, n)
	}
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: n}); err != nil {
		t.Fatal(err)
	}
	// The entry's content, its padding and the end of the archive are all
	// zeros too.
	return gzipZeros(t, hdr.Bytes(), n+1<<20)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestReadArchiveAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		archive []byte
		want    map[string]string
	}{
		{
			name:    "plain names",
			archive: makeArchive(t, file("workload.kat", "a"), file("job.kat", "b")),
			want:    map[string]string{"workload.kat": "a", "job.kat": "b"},
		},
		{
			name:    "dot-slash names and root entry",
			archive: makeArchive(t, special("./", tar.TypeDir, ""), file("./workload.kat", "a"), special(".", tar.TypeDir, "")),
			want:    map[string]string{"workload.kat": "a"},
		},
		{
			name:    "empty file",
			archive: makeArchive(t, file("workload.kat", "")),
			want:    map[string]string{"workload.kat": ""},
		},
		{
			name:    "file at the size limit",
			archive: makeArchive(t, file("workload.kat", strings.Repeat("x", 100))),
			want:    map[string]string{"workload.kat": strings.Repeat("x", 100)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := ReadArchive(bytes.NewReader(tc.archive), Limits{MaxFileBytes: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(files) != len(tc.want) {
				t.Fatalf("got %d files, want %d", len(files), len(tc.want))
			}
			for name, content := range tc.want {
				if got, ok := files[name]; !ok || string(got) != content {
					t.Errorf("%s = %q (present %v), want %q", name, got, ok, content)
				}
			}
		})
	}
}

func TestReadArchiveRefuses(t *testing.T) {
	t.Parallel()
	small := Limits{MaxFiles: 3, MaxFileBytes: 1 << 10, MaxTotalBytes: 2 << 10}
	kib := strings.Repeat("x", 1<<10)
	tests := []struct {
		name     string
		archive  []byte
		lim      Limits
		tooLarge bool   // wraps ErrTooLarge rather than ErrInvalidArchive
		want     string // substring of the error
	}{
		{name: "parent traversal", archive: makeArchive(t, file("../x.kat", "a")), want: `"../x.kat": ".." is not allowed`},
		{name: "nested traversal", archive: makeArchive(t, file("a/../../x.kat", "a")), want: `".." is not allowed`},
		{name: "dot-slash traversal", archive: makeArchive(t, file("./../x.kat", "a")), want: `".." is not allowed`},
		{name: "backslash traversal", archive: makeArchive(t, file(`..\x.kat`, "a")), want: `".." is not allowed`},
		{name: "absolute path", archive: makeArchive(t, file("/etc/x.kat", "a")), want: `"/etc/x.kat": absolute paths are not allowed`},
		{name: "symlink", archive: makeArchive(t, file("workload.kat", "a"), special("job.kat", tar.TypeSymlink, "/etc/passwd")), want: `"job.kat": symbolic links are not allowed`},
		{name: "hard link", archive: makeArchive(t, file("workload.kat", "a"), special("job.kat", tar.TypeLink, "workload.kat")), want: `"job.kat": hard links are not allowed`},
		{name: "char device", archive: makeArchive(t, special("null.kat", tar.TypeChar, "")), want: `"null.kat": device files are not allowed`},
		{name: "block device", archive: makeArchive(t, special("sda.kat", tar.TypeBlock, "")), want: "device files are not allowed"},
		{name: "fifo", archive: makeArchive(t, special("pipe.kat", tar.TypeFifo, "")), want: `"pipe.kat": FIFOs are not allowed`},
		{name: "nested directory", archive: makeArchive(t, special("sub/", tar.TypeDir, "")), want: `"sub/": sub-directories are not allowed`},
		{name: "nested file", archive: makeArchive(t, file("sub/workload.kat", "a")), want: `"sub/workload.kat": files must be at the root`},
		{name: "non-kat file", archive: makeArchive(t, file("workload.kat", "a"), file("README.md", "b")), want: `"README.md": not a .kat file`},
		{name: "duplicate name", archive: makeArchive(t, file("workload.kat", "a"), file("./workload.kat", "b")), want: `"./workload.kat": workload.kat appears more than once`},
		{name: "empty name", archive: makeArchive(t, file("", "a")), want: "empty name"},
		{name: "empty archive", archive: makeArchive(t), want: "archive holds no .kat files"},
		{name: "only the root directory", archive: makeArchive(t, special("./", tar.TypeDir, "")), want: "archive holds no .kat files"},
		{name: "empty input", archive: nil, want: "empty input, not a gzip stream"},
		{name: "not gzip", archive: []byte("apiVersion: kat.dws.rip/v1alpha1\n"), want: "not a gzip stream"},
		{name: "plain tar", archive: func() []byte {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			_ = tw.WriteHeader(&tar.Header{Name: "workload.kat", Typeflag: tar.TypeReg, Size: 0})
			_ = tw.Close()
			return buf.Bytes()
		}(), want: "not a gzip stream"},
		{name: "gzip but not tar", archive: gzipped(t, []byte(strings.Repeat("not a tar header ", 64))), want: "corrupt archive"},
		{name: "truncated", archive: func() []byte {
			a := makeArchive(t, file("workload.kat", kib))
			return a[:len(a)/2]
		}(), want: "corrupt archive"},
		{name: "bad checksum", archive: func() []byte {
			a := makeArchive(t, file("workload.kat", "a"))
			a[len(a)-8] ^= 0xff // CRC-32 in the gzip trailer
			return a
		}(), want: "corrupt archive"},
		{name: "trailing data", archive: append(makeArchive(t, file("workload.kat", "a")), "junk"...), want: "unexpected data after the gzip stream"},
		{name: "oversized file", archive: makeArchive(t, file("workload.kat", kib+"x")), lim: small, tooLarge: true, want: `"workload.kat": 1025 bytes, more than the limit of 1024`},
		{name: "too many files", archive: makeArchive(t, file("a.kat", ""), file("b.kat", ""), file("c.kat", ""), file("d.kat", "")), lim: small, tooLarge: true, want: "more than 3 files"},
		{name: "too many entries", archive: makeArchive(t, special("./", tar.TypeDir, ""), special("./", tar.TypeDir, ""), special("./", tar.TypeDir, ""), special("./", tar.TypeDir, ""), special("./", tar.TypeDir, ""), special("./", tar.TypeDir, "")), lim: small, tooLarge: true, want: "more than 5 entries"},
		{name: "total too large", archive: makeArchive(t, file("a.kat", kib), file("b.kat", kib), file("c.kat", "x")), lim: small, tooLarge: true, want: "files hold more than 2048 bytes"},
		{name: "tar bomb", archive: bomb(t, "workload.kat", 100<<20), tooLarge: true, want: "104857600 bytes, more than the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files, err := ReadArchive(bytes.NewReader(tc.archive), tc.lim)
			if err == nil {
				t.Fatalf("accepted: %v", files)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
			want := ErrInvalidArchive
			if tc.tooLarge {
				want = ErrTooLarge
			}
			if !errors.Is(err, want) {
				t.Errorf("error = %v, want it to wrap %v", err, want)
			}
		})
	}
}

// TestReadArchiveGzipBomb checks that 100 MiB of compressed zeros are cut
// off just past the limit, reading only a small part of the input.
func TestReadArchiveGzipBomb(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		archive []byte
	}{
		{"raw zeros", bomb(t, "", 100<<20)},
		{"zeros after a valid archive", gzippedTarThenZeros(t, 100<<20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &countingReader{r: bytes.NewReader(tc.archive)}
			_, err := ReadArchive(in, DefaultLimits)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error = %v, want ErrTooLarge", err)
			}
			if in.n > int64(len(tc.archive))/4 {
				t.Errorf("read %d of %d compressed bytes; the limit should stop reading early", in.n, len(tc.archive))
			}
		})
	}
}

// gzippedTarThenZeros is a valid tar archive followed, inside the same gzip
// stream, by n zero bytes.
func gzippedTarThenZeros(t *testing.T, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "workload.kat", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return gzipZeros(t, buf.Bytes(), n)
}

// TestGzipZeros checks the bomb builder itself: its output must be a valid
// gzip stream of the promised length.
func TestGzipZeros(t *testing.T) {
	t.Parallel()
	const n = 5 << 20
	data := gzipZeros(t, []byte("prefix"), n)
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 6)
	if _, err := io.ReadFull(gz, head); err != nil || string(head) != "prefix" {
		t.Fatalf("prefix = %q, %v", head, err)
	}
	got, err := io.Copy(io.Discard, gz)
	if err != nil || got != n {
		t.Fatalf("decompressed %d zero bytes, %v; want %d", got, err, n)
	}
}

func TestWriteArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	files := map[string][]byte{
		"workload.kat":            []byte(minimalWorkload),
		"VirtualLoadBalancer.kat": []byte("x"),
		"empty.kat":               nil,
	}
	var a, b bytes.Buffer
	if err := WriteArchive(&a, files); err != nil {
		t.Fatal(err)
	}
	copied := map[string][]byte{}
	for _, k := range []string{"empty.kat", "workload.kat", "VirtualLoadBalancer.kat"} {
		copied[k] = files[k]
	}
	if err := WriteArchive(&b, copied); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("WriteArchive is not deterministic")
	}
	got, err := ReadArchive(bytes.NewReader(a.Bytes()), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(files) {
		t.Fatalf("got %d files, want %d", len(got), len(files))
	}
	for name, data := range files {
		if !bytes.Equal(got[name], data) {
			t.Errorf("%s = %q, want %q", name, got[name], data)
		}
	}
	// Entries are sorted, owned by nobody, 0644 and dated zero.
	gz, err := gzip.NewReader(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Mode != 0o644 || hdr.ModTime.Unix() != 0 || hdr.Uid != 0 || hdr.Uname != "" {
			t.Errorf("%s: mode %o, mtime %v, uid %d, uname %q", hdr.Name, hdr.Mode, hdr.ModTime, hdr.Uid, hdr.Uname)
		}
	}
	if got := strings.Join(names, ","); got != "VirtualLoadBalancer.kat,empty.kat,workload.kat" {
		t.Errorf("entries = %s, want sorted", got)
	}

	q, err := LoadArchive(bytes.NewReader(mustArchive(t, map[string][]byte{"workload.kat": []byte(minimalWorkload)})), ParseOptions{})
	if err != nil || q.Name() != "app" {
		t.Fatalf("LoadArchive = %v, %v", q, err)
	}
}

func TestWriteArchiveRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"../x.kat", "sub/x.kat", "x.yaml", ""} {
		t.Run(name, func(t *testing.T) {
			if err := WriteArchive(io.Discard, map[string][]byte{name: nil}); err == nil {
				t.Errorf("WriteArchive accepted %q", name)
			}
		})
	}
}

func mustArchive(t testing.TB, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteArchive(&buf, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
