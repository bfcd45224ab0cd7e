package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestTCP: the ports are distinct, below the ephemeral range, and free: a
// server binds each.
func TestTCP(t *testing.T) {
	ports, err := TCP(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < 20000 || p > 29999 || seen[p] {
			t.Errorf("ports %v: %d is out of 20000-29999 or twice", ports, p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		_ = ln.Close()
	}
}
