package mountinfo

import (
	"slices"
	"strings"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `a\134b`: `a\b`, `tab\011`: "tab\t", `plain`: "plain", `end\04`: `end\04`, `\999`: `\999`} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPointsBelow(t *testing.T) {
	line := func(point string) string {
		return "36 35 98:0 / " + point + " rw,noatime master:1 - overlay overlay rw\n"
	}
	table := line("/") + line("/s/n1") + line(`/s/n1/podman/root/overlay/a\040b/merged`) + line("/s/n1/run/shm") +
		line("/s/n10/x") + line("/s/n1/run/shm") + line("/other/s/n1")
	got, err := PointsBelow(strings.NewReader(table), "/s/n1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/s/n1/podman/root/overlay/a b/merged", "/s/n1/run/shm", "/s/n1/run/shm", "/s/n1"}
	if !slices.Equal(got, want) {
		t.Errorf("PointsBelow = %q, want %q", got, want)
	}
}
