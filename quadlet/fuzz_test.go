package quadlet

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// corpusDirs returns every example directory in testdata.
func corpusDirs(t testing.TB) []string {
	t.Helper()
	var dirs []string
	for _, pattern := range []string{"testdata/valid/*", "testdata/invalid/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range m {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

func FuzzParseWorkload(f *testing.F) {
	for _, dir := range corpusDirs(f) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			f.Fatal(err)
		}
		var workload []byte
		other, otherName := []byte(nil), "extra.kat"
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			if e.Name() == WorkloadFile {
				workload = data
			} else {
				other, otherName = data, e.Name()
			}
		}
		f.Add(workload, otherName, other)
	}
	f.Fuzz(func(t *testing.T, workload []byte, otherName string, other []byte) {
		files := map[string][]byte{WorkloadFile: workload}
		if otherName != WorkloadFile {
			files[otherName] = other
		}
		q, err := ParseWorkload(files, ParseOptions{})
		if err != nil {
			if q != nil {
				t.Fatal("ParseWorkload returned both a Quadlet and an error")
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if dnsLabel(q.Name()) != "" || dnsLabel(q.Namespace()) != "" {
			t.Fatalf("accepted invalid name %q/%q", q.Namespace(), q.Name())
		}
		canon := q.CanonicalJSON()
		if !json.Valid(canon) {
			t.Fatalf("invalid canonical JSON: %s", canon)
		}
		// The files survive an archive round trip with the same hash.
		if DefaultLimits.Check(files) != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteArchive(&buf, files); err != nil {
			t.Fatalf("WriteArchive of accepted files: %v", err)
		}
		again, err := LoadArchive(&buf, ParseOptions{})
		if err != nil || again.SpecHash() != q.SpecHash() {
			t.Fatalf("archive round trip differs: %v", err)
		}
	})
}

func FuzzReadArchive(f *testing.F) {
	for _, dir := range corpusDirs(f)[:8] {
		files, err := ReadDir(dir, DefaultLimits)
		if err != nil {
			continue
		}
		var buf bytes.Buffer
		if err := WriteArchive(&buf, files); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	hostile := [][]entry{
		{file("../x.kat", "a")},
		{file("/etc/x.kat", "a")},
		{file("a/../../x.kat", "a")},
		{special("job.kat", tar.TypeSymlink, "/etc/passwd")},
		{special("job.kat", tar.TypeLink, "workload.kat")},
		{special("null.kat", tar.TypeChar, "")},
		{special("pipe.kat", tar.TypeFifo, "")},
		{special("sub/", tar.TypeDir, ""), file("sub/x.kat", "a")},
		{file("README.md", "a")},
		{file("workload.kat", "a"), file("./workload.kat", "b")},
		{special("./", tar.TypeDir, ""), file("./workload.kat", "a")},
		{},
	}
	for _, entries := range hostile {
		f.Add(makeArchive(f, entries...))
	}
	f.Add(bomb(f, "", 1<<20))
	f.Add([]byte("not gzip"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := DefaultLimits
		files, err := ReadArchive(bytes.NewReader(data), lim)
		if err != nil {
			if files != nil {
				t.Fatal("ReadArchive returned both files and an error")
			}
			return
		}
		if len(files) == 0 || len(files) > lim.MaxFiles {
			t.Fatalf("accepted %d files", len(files))
		}
		var total int64
		for name, content := range files {
			if FileNameProblem(name) != "" || strings.ContainsAny(name, "/\\") || name != filepath.Base(name) {
				t.Fatalf("accepted unsafe name %q", name)
			}
			if int64(len(content)) > lim.MaxFileBytes {
				t.Fatalf("accepted %s with %d bytes", name, len(content))
			}
			total += int64(len(content))
		}
		if total > lim.MaxTotalBytes {
			t.Fatalf("accepted %d bytes in all", total)
		}
		var buf bytes.Buffer
		if err := WriteArchive(&buf, files); err != nil {
			t.Fatalf("WriteArchive of accepted files: %v", err)
		}
		back, err := ReadArchive(&buf, lim)
		if err != nil || len(back) != len(files) {
			t.Fatalf("round trip: %d files, %v", len(back), err)
		}
		for name, content := range files {
			if !bytes.Equal(back[name], content) {
				t.Fatalf("round trip changed %s", name)
			}
		}
	})
}
