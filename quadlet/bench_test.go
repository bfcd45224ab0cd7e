package quadlet

import (
	"bytes"
	"path/filepath"
	"testing"
)

func benchFiles(b *testing.B) map[string][]byte {
	b.Helper()
	files, err := ReadDir(filepath.Join("testdata", "valid", "web"), DefaultLimits)
	if err != nil {
		b.Fatal(err)
	}
	return files
}

// BenchmarkParseWorkload measures parsing, defaulting, validating and hashing
// one Service with a VirtualLoadBalancer.
func BenchmarkParseWorkload(b *testing.B) {
	files := benchFiles(b)
	b.ReportAllocs()
	for b.Loop() {
		q, err := ParseWorkload(files, ParseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_ = q.SpecHash()
	}
}

// BenchmarkReadArchive measures unpacking an uploaded tar.gz Quadlet.
func BenchmarkReadArchive(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteArchive(&buf, benchFiles(b)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadArchive(bytes.NewReader(buf.Bytes()), DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}
