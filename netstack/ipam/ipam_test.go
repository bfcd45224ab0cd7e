package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestPoolAllocate(t *testing.T) {
	cases := []struct {
		name    string
		subnet  string
		held    []netip.Addr
		cooling []netip.Addr
		// release is freed after the first n allocations.
		n       int
		release []netip.Addr
		// want are the addresses of every allocation, in order; wantErr
		// the text of the error that ends them ("" when none may).
		want    []string
		wantErr string
	}{
		{
			name: "skips the network, first and broadcast addresses", subnet: "10.100.4.0/30",
			want: []string{"10.100.4.2"}, wantErr: "all 1 addresses of 10.100.4.0/30 are held",
		},
		{
			name: "lowest free first, never a held one", subnet: "10.100.4.0/29",
			held: addrs("10.100.4.2", "10.100.4.4"),
			want: []string{"10.100.4.3", "10.100.4.5", "10.100.4.6"}, wantErr: "all 5 addresses of 10.100.4.0/29 are held",
		},
		{
			name: "an unmasked subnet is its network", subnet: "10.100.4.5/29",
			want:    []string{"10.100.4.2", "10.100.4.3", "10.100.4.4", "10.100.4.5", "10.100.4.6"},
			wantErr: "all 5 addresses of 10.100.4.0/29 are held",
		},
		{
			name: "cooling addresses come last", subnet: "10.100.4.0/29",
			cooling: addrs("10.100.4.2", "10.100.4.3"),
			want:    []string{"10.100.4.4", "10.100.4.5", "10.100.4.6", "10.100.4.2", "10.100.4.3"},
			wantErr: "10.100.4.0/29",
		},
		{
			name: "a released address is reused only when nothing else is free", subnet: "10.100.4.0/29",
			n: 3, release: addrs("10.100.4.3"),
			want:    []string{"10.100.4.2", "10.100.4.3", "10.100.4.4", "10.100.4.5", "10.100.4.6", "10.100.4.3"},
			wantErr: "10.100.4.0/29",
		},
		{
			name: "releasing a free address frees nothing", subnet: "10.100.4.0/30",
			n: 0, release: addrs("10.100.4.2", "10.100.4.1", "10.100.5.2"),
			want: []string{"10.100.4.2"}, wantErr: "10.100.4.0/30",
		},
		{
			name: "held addresses outside the instance range are ignored", subnet: "10.100.4.0/30",
			held: addrs("10.100.4.0", "10.100.4.1", "10.100.4.3", "10.100.9.2"),
			want: []string{"10.100.4.2"}, wantErr: "10.100.4.0/30",
		},
		{
			name: "a full subnet names itself", subnet: "10.100.2.0/23",
			held: func() []netip.Addr {
				var out []netip.Addr
				for ip := netip.MustParseAddr("10.100.2.2"); ip.Compare(netip.MustParseAddr("10.100.3.254")) <= 0; ip = ip.Next() {
					out = append(out, ip)
				}
				return out
			}(),
			wantErr: "all 509 addresses of 10.100.2.0/23 are held",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPool(netip.MustParsePrefix(tc.subnet), tc.held, tc.cooling)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[netip.Addr]bool{}
			for _, ip := range tc.held {
				seen[ip] = true
			}
			var got []string
			for i := 0; ; i++ {
				if i == tc.n {
					for _, ip := range tc.release {
						p.Release(ip)
						delete(seen, ip)
					}
				}
				ip, err := p.Allocate()
				if err != nil {
					if !errors.Is(err, ErrSubnetFull) || !strings.Contains(err.Error(), tc.wantErr) || tc.wantErr == "" {
						t.Fatalf("allocation %d: error %v, want ErrSubnetFull saying %q", i, err, tc.wantErr)
					}
					if p.Free() != 0 {
						t.Errorf("full pool reports %d free", p.Free())
					}
					break
				}
				if seen[ip] {
					t.Fatalf("allocation %d handed out %s, which is held", i, ip)
				}
				if !InstanceAddress(p.Subnet(), ip) {
					t.Fatalf("allocation %d handed out %s, not an instance address of %s", i, ip, p.Subnet())
				}
				seen[ip] = true
				got = append(got, ip.String())
				if i > 600 {
					t.Fatal("the pool never fills")
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("allocated %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewPoolRefusesWhatHasNoInstanceAddress(t *testing.T) {
	for _, s := range []string{"10.100.4.0/31", "10.100.4.0/32", "fd00::/64"} {
		if _, err := NewPool(netip.MustParsePrefix(s), nil, nil); err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("NewPool(%s): error %v, want one naming the subnet", s, err)
		}
	}
	if _, err := NewPool(netip.Prefix{}, nil, nil); err == nil {
		t.Error("NewPool of no subnet: no error")
	}
}

func TestInstanceAddress(t *testing.T) {
	sub := netip.MustParsePrefix("10.100.2.0/23")
	for ip, want := range map[string]bool{
		"10.100.2.0": false, "10.100.2.1": false, "10.100.2.2": true, "10.100.2.255": true,
		"10.100.3.0": true, "10.100.3.254": true, "10.100.3.255": false, "10.100.4.2": false,
	} {
		if got := InstanceAddress(sub, netip.MustParseAddr(ip)); got != want {
			t.Errorf("InstanceAddress(%s, %s) = %v, want %v", sub, ip, got, want)
		}
	}
	if Usable(sub) != 509 {
		t.Errorf("Usable(%s) = %d, want 509", sub, Usable(sub))
	}
}
