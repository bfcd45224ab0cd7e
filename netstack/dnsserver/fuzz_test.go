package dnsserver

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// FuzzHandler: whatever bytes arrive, the handler never panics, and what
// it answers over UDP packs into at most the size it may send.
func FuzzHandler(f *testing.F) {
	for _, q := range []*dns.Msg{
		query("web.shop.kat.test.", dns.TypeA),
		query("_http._tcp.web.shop.kat.test.", dns.TypeSRV),
		query("web.", dns.TypeA),
		query("nope.kat.test.", dns.TypeAAAA),
		query("kat.test.", dns.TypeANY),
		query("example.com.", dns.TypeMX),
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		q.SetEdns0(4096, true)
		if b, err = q.Pack(); err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	// A handler without upstreams: the fuzzer never waits on a network.
	h := testHandler(f)
	f.Fuzz(func(t *testing.T, b []byte, fromShop bool) {
		r := new(dns.Msg)
		if err := r.Unpack(b); err != nil {
			return // miekg's server drops what does not unpack
		}
		src := netip.MustParseAddr("10.99.0.99")
		if fromShop {
			src = netip.MustParseAddr("10.99.0.50")
		}
		m := h.Answer(t.Context(), r, src, false)
		out, err := m.Pack()
		if err != nil {
			return
		}
		limit := dns.MinMsgSize
		if r.IsEdns0() != nil {
			limit = maxUDPSize
		}
		if len(out) > limit {
			t.Errorf("UDP answer of %d bytes, limit %d", len(out), limit)
		}
	})
}
