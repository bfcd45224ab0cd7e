package runtime

import (
	"net"
	"strings"
	"testing"
)

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     PortRange
		err      string
	}{
		{name: "default", in: "30000-32767", want: DefaultHostPorts},
		{name: "one port", in: "8080-8080", want: PortRange{8080, 8080}},
		{name: "no dash", in: "30000", err: "want FIRST-LAST"},
		{name: "not a number", in: "a-10", err: "first port"},
		{name: "reversed", in: "10-5", err: "1 <= FIRST <= LAST <= 65535"},
		{name: "too high", in: "1-70000", err: "1 <= FIRST <= LAST <= 65535"},
		{name: "zero", in: "0-10", err: "1 <= FIRST <= LAST <= 65535"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r PortRange
			err := r.Set(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Set(%q) = %v, want an error containing %q", tc.in, err, tc.err)
				}
				return
			}
			if err != nil || r != tc.want {
				t.Fatalf("Set(%q) = %v, %v; want %v", tc.in, r, err, tc.want)
			}
			if r.String() != tc.in {
				t.Errorf("String() = %q, want %q", r.String(), tc.in)
			}
		})
	}
}

// TestPortRangePick: Pick returns a port of the range, skips those taken
// says are taken and those a program listens on, and 0 when none is left.
func TestPortRangePick(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	// A listener on 127.0.0.1 keeps the port from being bound on every
	// address, so the range {busy} has no free port.
	if got := (PortRange{busy, busy}).Pick(nil); got != 0 {
		t.Errorf("Pick over a port in use = %d, want 0", got)
	}
	r := PortRange{First: 31000, Last: 31009}
	taken := func(p int) bool { return p != 31007 }
	for range 20 {
		if got := r.Pick(taken); got != 31007 && got != 0 {
			t.Fatalf("Pick = %d, want the one port not taken (31007) or 0 if in use on this host", got)
		}
	}
	seen := map[int]bool{}
	for range 200 {
		p := r.Pick(nil)
		if p < r.First || p > r.Last {
			t.Fatalf("Pick = %d, outside %s", p, r)
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Errorf("Pick always chose %v: want a random start so agents sharing a host seldom collide", seen)
	}
}
