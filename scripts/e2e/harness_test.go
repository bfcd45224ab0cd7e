package e2e

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestPickClusterCIDR: a cluster's /16 meets no subnet a Podman network of
// the machine holds, however many of 10.130–249 are taken. Not parallel:
// the clusters of parallel tests draw from the same counter.
func TestPickClusterCIDR(t *testing.T) {
	var used []netip.Prefix
	for i := 130; i < 250; i++ {
		if i != 201 {
			used = append(used, netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/23", i)))
		}
	}
	if got, want := pickClusterCIDR(used), "clusterCIDR: 10.201.0.0/16"; got != want {
		t.Errorf("with only 10.201 free: %q, want %q", got, want)
	}
	// Every one taken: one is given anyway, and kat-agent reports the
	// clash.
	got := pickClusterCIDR([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")})
	if p, err := netip.ParsePrefix(got[len("clusterCIDR: "):]); err != nil || p.Bits() != 16 || p.Addr().As4()[1] < 130 || p.Addr().As4()[1] > 249 {
		t.Errorf("with every /16 taken: %q, want one of 10.130–249.0.0/16", got)
	}
	seen := map[string]bool{}
	for range 120 {
		seen[pickClusterCIDR(nil)] = true
	}
	if len(seen) != 120 {
		t.Errorf("120 picks with nothing used gave %d different /16s, want 120", len(seen))
	}
}
