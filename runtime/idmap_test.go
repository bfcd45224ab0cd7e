package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSubIDRange(t *testing.T) {
	const good = "root:100000:65536\ncontainers:2147483647:2147483648\n"
	tests := []struct {
		name, subuid, subgid string
		want                 SubIDRange
		err                  string
	}{
		{name: "install-prereqs range", subuid: good, subgid: good, want: SubIDRange{Start: 2147483647, Count: 2147483648}},
		{name: "no containers line", subuid: "root:100000:65536\n", subgid: good, err: "has no range for containers"},
		{name: "ranges differ", subuid: good, subgid: "containers:3000000:2147483648\n", err: "differ"},
		{name: "bad number", subuid: "containers:x:1\n", subgid: good, err: "bad line"},
		{name: "too small", subuid: "containers:100000:1000\n", subgid: "containers:100000:1000\n", err: "holds no 65536 ids"},
		{name: "starts at root", subuid: "containers:0:70000\n", subgid: "containers:0:70000\n", err: "above 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			u, g := filepath.Join(dir, "subuid"), filepath.Join(dir, "subgid")
			must(t, os.WriteFile(u, []byte(tc.subuid), 0o644))
			must(t, os.WriteFile(g, []byte(tc.subgid), 0o644))
			got, err := ReadSubIDRange(u, g, "containers")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestSubIDRangeMap(t *testing.T) {
	r := SubIDRange{Start: 2147483647, Count: 2147483648}
	if r.Slots() != 32768 {
		t.Fatalf("slots %d, want 32768", r.Slots())
	}
	for _, tc := range []struct {
		slot int
		base int64
		ok   bool
	}{{0, 2147483647, true}, {1, 2147483647 + 65536, true}, {32767, 2147483647 + 32767*65536, true}, {32768, 0, false}, {-1, 0, false}} {
		m, ok := r.Map(tc.slot)
		if ok != tc.ok || (ok && m.HostBase != tc.base) {
			t.Errorf("slot %d: got %+v, %v; want base %d, %v", tc.slot, m, ok, tc.base, tc.ok)
		}
	}
}
