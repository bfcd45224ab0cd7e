package resources_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func TestFirstFreeSubnet(t *testing.T) {
	cidr := netip.MustParsePrefix("10.100.0.0/16")
	p := netip.MustParsePrefix
	cases := []struct {
		name  string
		bits  int
		taken []netip.Prefix
		want  string
		err   bool
	}{
		{name: "spec example: /23s from the start", bits: 7, want: "10.100.0.0/23"},
		{name: "skips the held one", bits: 7, taken: []netip.Prefix{p("10.100.0.0/23")}, want: "10.100.2.0/23"},
		{name: "fills a hole", bits: 7, taken: []netip.Prefix{p("10.100.0.0/23"), p("10.100.4.0/23")}, want: "10.100.2.0/23"},
		{name: "exhausted", bits: 1, taken: []netip.Prefix{p("10.100.0.0/17"), p("10.100.128.0/17")}, err: true},
		{name: "too many bits", bits: 15, err: true},
		{name: "no bits", bits: 0, err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resources.FirstFreeSubnet(cidr, c.bits, c.taken)
			if c.err {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil || got.String() != c.want {
				t.Fatalf("got %v, %v; want %s", got, err, c.want)
			}
		})
	}
}

// Subnets are handed out once even when nodes join at the same time, and
// a deleted node's subnet is free again.
func TestEnsureNodeNetwork(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	cidr := netip.MustParsePrefix("10.100.0.0/16")
	const nodes = 12
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Go(func() {
			name := fmt.Sprintf("n%d", i)
			if err := r.RegisterJoiningNode(ctx, api.NodeRegistration{Name: name, UID: name}); err != nil {
				errs <- err
				return
			}
			_, err := r.EnsureNodeNetwork(ctx, name, cidr, 7, "key-"+name, "192.0.2.1:51820")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	nets, err := r.ListNodeNetworks(ctx)
	if err != nil || len(nets) != nodes {
		t.Fatalf("list: %d records, %v", len(nets), err)
	}
	seen := map[netip.Prefix]string{}
	for _, n := range nets {
		if n.Subnet.Bits() != 23 || !cidr.Contains(n.Subnet.Addr()) {
			t.Fatalf("node %s got subnet %v", n.Node, n.Subnet)
		}
		if other, dup := seen[n.Subnet]; dup {
			t.Fatalf("subnet %v handed to %s and %s", n.Subnet, other, n.Node)
		}
		seen[n.Subnet] = n.Node
		if n.PublicKey != "key-"+n.Node || n.Endpoint != "192.0.2.1:51820" {
			t.Fatalf("record %+v", n)
		}
		if n.OverlayIP() != n.Subnet.Addr().Next() {
			t.Fatalf("overlay IP %v of %v", n.OverlayIP(), n.Subnet)
		}
	}

	// Again: the subnet stays, a new key replaces the old one.
	n3, err := r.GetNodeNetwork(ctx, "n3")
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.EnsureNodeNetwork(ctx, "n3", cidr, 7, "rotated", "")
	if err != nil || again.Subnet != n3.Subnet || again.PublicKey != "rotated" || again.Endpoint != n3.Endpoint {
		t.Fatalf("again: %+v, %v (was %+v)", again, err, n3)
	}

	// Deleting n3 frees its subnet for the next node and removes its keys.
	if err := r.DeleteNode(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GetNodeNetwork(ctx, "n3"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("n3's record after delete: %v", err)
	}
	next, err := r.EnsureNodeNetwork(ctx, "late", cidr, 7, "", "")
	if err != nil || next.Subnet != n3.Subnet {
		t.Fatalf("late node got %+v, %v; want n3's freed %v", next, err, n3.Subnet)
	}
}
