package dnsserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"kat.dws.rip/kat/api"
)

const testDomain = "kat.test"

// record is a ready instance of workload in ns at ip, with the named ports.
func record(ns, workload, id, ip string, ports ...api.DNSPort) api.DNSRecord {
	return api.DNSRecord{Namespace: ns, Workload: workload, InstanceID: id, IP: netip.MustParseAddr(ip), Ports: ports}
}

var (
	httpPort = api.DNSPort{Name: "http", Port: 8080, Protocol: "tcp"}
	dnsPort  = api.DNSPort{Name: "dns", Port: 53, Protocol: "udp"}
)

// testRecords: web in shop (two instances, named ports), web in blog (one
// instance), db in shop.
func testRecords() []api.DNSRecord {
	return []api.DNSRecord{
		record("shop", "web", "web-a", "10.99.0.2", httpPort, dnsPort),
		record("shop", "web", "web-b", "10.99.1.2", httpPort, dnsPort),
		record("blog", "web", "web-c", "10.99.0.3"),
		record("shop", "db", "db-a", "10.99.0.4"),
	}
}

// testHandler answers from testRecords; 10.99.0.50 is a container of shop,
// 10.99.0.51 one of blog; it has no upstream.
func testHandler(t testing.TB, upstreams ...string) *Handler {
	t.Helper()
	src := &SourceMap{}
	src.Set(map[netip.Addr]string{
		netip.MustParseAddr("10.99.0.50"): "shop",
		netip.MustParseAddr("10.99.0.51"): "blog",
	})
	h := NewHandler(HandlerConfig{Domain: testDomain, Sources: src, Upstreams: upstreams})
	h.SetRecords(testRecords(), 7)
	return h
}

// render writes a reply as text: its rcode and flags, then one line per
// RR of each section, each section sorted (answers rotate).
func render(m *dns.Msg) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", dns.RcodeToString[m.Rcode])
	if m.Authoritative {
		b.WriteString(" aa")
	}
	if m.Truncated {
		b.WriteString(" tc")
	}
	for _, sec := range []struct {
		name string
		rrs  []dns.RR
	}{{"an", m.Answer}, {"ns", m.Ns}, {"ex", m.Extra}} {
		var lines []string
		for _, rr := range sec.rrs {
			if _, ok := rr.(*dns.OPT); ok {
				continue
			}
			lines = append(lines, sec.name+" "+strings.Join(strings.Fields(rr.String()), " "))
		}
		slices.Sort(lines)
		for _, l := range lines {
			b.WriteString("\n" + l)
		}
	}
	return b.String()
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

const soaLine = "ns kat.test. 5 IN SOA ns.dns.kat.test. hostmaster.kat.test. 7 60 10 3600 5"

func TestHandlerAnswers(t *testing.T) {
	h := testHandler(t)
	for _, tc := range []struct {
		name  string
		query *dns.Msg
		src   string
		want  string
	}{
		{"every ready instance of a workload", query("web.shop.kat.test.", dns.TypeA), "", `NOERROR aa
an web.shop.kat.test. 5 IN A 10.99.0.2
an web.shop.kat.test. 5 IN A 10.99.1.2`},
		{"one instance", query("web-b.web.shop.kat.test.", dns.TypeA), "", `NOERROR aa
an web-b.web.shop.kat.test. 5 IN A 10.99.1.2`},
		{"SRV of a named TCP port, targets' A as additionals", query("_http._tcp.web.shop.kat.test.", dns.TypeSRV), "", `NOERROR aa
an _http._tcp.web.shop.kat.test. 5 IN SRV 0 10 8080 web-a.web.shop.kat.test.
an _http._tcp.web.shop.kat.test. 5 IN SRV 0 10 8080 web-b.web.shop.kat.test.
ex web-a.web.shop.kat.test. 5 IN A 10.99.0.2
ex web-b.web.shop.kat.test. 5 IN A 10.99.1.2`},
		{"SRV of a named UDP port", query("_dns._udp.web.shop.kat.test.", dns.TypeSRV), "", `NOERROR aa
an _dns._udp.web.shop.kat.test. 5 IN SRV 0 10 53 web-a.web.shop.kat.test.
an _dns._udp.web.shop.kat.test. 5 IN SRV 0 10 53 web-b.web.shop.kat.test.
ex web-a.web.shop.kat.test. 5 IN A 10.99.0.2
ex web-b.web.shop.kat.test. 5 IN A 10.99.1.2`},
		{"unknown name: NXDOMAIN with the SOA", query("nope.shop.kat.test.", dns.TypeA), "", "NXDOMAIN aa\n" + soaLine},
		{"unknown port: NXDOMAIN", query("_grpc._tcp.web.shop.kat.test.", dns.TypeSRV), "", "NXDOMAIN aa\n" + soaLine},
		{"existing name, other type: NODATA with the SOA", query("web.shop.kat.test.", dns.TypeAAAA), "", "NOERROR aa\n" + soaLine},
		{"SRV asked of an A name: NODATA", query("web.shop.kat.test.", dns.TypeSRV), "", "NOERROR aa\n" + soaLine},
		{"namespace (empty non-terminal): NODATA", query("shop.kat.test.", dns.TypeA), "", "NOERROR aa\n" + soaLine},
		{"apex SOA", query("kat.test.", dns.TypeSOA), "", "NOERROR aa\n" + strings.Replace(soaLine, "ns ", "an ", 1)},
		{"case does not matter", query("WeB.sHoP.KAT.test.", dns.TypeA), "", `NOERROR aa
an web.shop.kat.test. 5 IN A 10.99.0.2
an web.shop.kat.test. 5 IN A 10.99.1.2`},
		{"short name in the source's namespace", query("web.", dns.TypeA), "10.99.0.50", `NOERROR
an web. 5 IN A 10.99.0.2
an web. 5 IN A 10.99.1.2`},
		{"the same short name from another namespace", query("web.", dns.TypeA), "10.99.0.51", `NOERROR
an web. 5 IN A 10.99.0.3`},
		{"short name of another type: NODATA", query("db.", dns.TypeAAAA), "10.99.0.50", "NOERROR\n" + soaLine},
		{"short name missing in the namespace goes upstream", query("db.", dns.TypeA), "10.99.0.51", "SERVFAIL"},
		{"short name from an unknown source goes upstream", query("web.", dns.TypeA), "10.99.0.99", "SERVFAIL"},
		{"a cluster name is never forwarded", query("web.nope.kat.test.", dns.TypeA), "10.99.0.50", "NXDOMAIN aa\n" + soaLine},
		{"class CH refused", func() *dns.Msg {
			m := query("web.shop.kat.test.", dns.TypeA)
			m.Question[0].Qclass = dns.ClassCHAOS
			return m
		}(), "", "REFUSED"},
		{"ANY refused", query("web.shop.kat.test.", dns.TypeANY), "", "REFUSED"},
		{"AXFR refused", query("kat.test.", dns.TypeAXFR), "", "REFUSED"},
		{"no question: FORMERR", &dns.Msg{}, "", "FORMERR"},
		{"not a query: NOTIMP", func() *dns.Msg {
			m := query("web.shop.kat.test.", dns.TypeA)
			m.Opcode = dns.OpcodeUpdate
			return m
		}(), "", "NOTIMP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src netip.Addr
			if tc.src != "" {
				src = netip.MustParseAddr(tc.src)
			}
			got := h.Answer(t.Context(), tc.query, src, false)
			if got.Id != tc.query.Id || !got.Response {
				t.Errorf("reply id %d response %v, want id %d and a response", got.Id, got.Response, tc.query.Id)
			}
			if r := render(got); r != tc.want {
				t.Errorf("answer:\n%s\nwant:\n%s", r, tc.want)
			}
		})
	}
}

// TestHandlerRotatesAnswers: consecutive queries get the instances in
// turns, so clients that take the first spread over them.
func TestHandlerRotatesAnswers(t *testing.T) {
	h := testHandler(t)
	firsts := map[string]bool{}
	for range 4 {
		m := h.Answer(t.Context(), query("web.shop.kat.test.", dns.TypeA), netip.Addr{}, false)
		firsts[m.Answer[0].(*dns.A).A.String()] = true
	}
	if len(firsts) != 2 {
		t.Errorf("first answers over 4 queries: %v, want both instances", firsts)
	}
}

// TestHandlerTruncates: a workload of 200 instances does not fit 512 bytes
// over UDP: the answer is cut, TC set, and the same question over TCP gets
// them all; an EDNS0 client gets up to 1232 bytes and an OPT record.
func TestHandlerTruncates(t *testing.T) {
	var recs []api.DNSRecord
	for i := range 200 {
		recs = append(recs, record("ns", "big", fmt.Sprintf("big-%d", i), fmt.Sprintf("10.98.%d.%d", i/250, i%250+1)))
	}
	h := NewHandler(HandlerConfig{Domain: testDomain})
	h.SetRecords(recs, 1)
	size := func(m *dns.Msg) int {
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	udp := h.Answer(t.Context(), query("big.ns.kat.test.", dns.TypeA), netip.Addr{}, false)
	if !udp.Truncated || size(udp) > dns.MinMsgSize || len(udp.Answer) == 0 {
		t.Errorf("UDP answer: tc %v, %d bytes, %d records; want tc, at most 512 bytes, some records", udp.Truncated, size(udp), len(udp.Answer))
	}
	q := query("big.ns.kat.test.", dns.TypeA)
	q.SetEdns0(4096, false)
	edns := h.Answer(t.Context(), q, netip.Addr{}, false)
	if !edns.Truncated || size(edns) > maxUDPSize || edns.IsEdns0() == nil || len(edns.Answer) <= len(udp.Answer) {
		t.Errorf("EDNS0 answer: tc %v, %d bytes, OPT %v, %d records; want tc, at most %d bytes, an OPT, more than %d records",
			edns.Truncated, size(edns), edns.IsEdns0() != nil, len(edns.Answer), maxUDPSize, len(udp.Answer))
	}
	tcp := h.Answer(t.Context(), query("big.ns.kat.test.", dns.TypeA), netip.Addr{}, true)
	if tcp.Truncated || len(tcp.Answer) != 200 {
		t.Errorf("TCP answer: tc %v, %d records; want all 200", tcp.Truncated, len(tcp.Answer))
	}
	// The zone's shared records are untouched by the cuts.
	again := h.Answer(t.Context(), query("big.ns.kat.test.", dns.TypeA), netip.Addr{}, true)
	if len(again.Answer) != 200 {
		t.Errorf("TCP answer after the cuts: %d records, want 200", len(again.Answer))
	}
}

// TestZoneSkipsBadRecords: records whose names are not DNS labels, or
// without an IPv4 address, are left out; their neighbours stay.
func TestZoneSkipsBadRecords(t *testing.T) {
	h := NewHandler(HandlerConfig{Domain: testDomain})
	bad := record("ns", "web", "x.y", "10.0.0.1")
	v6 := api.DNSRecord{Namespace: "ns", Workload: "v6", InstanceID: "v6-a", IP: netip.MustParseAddr("fd00::1")}
	h.SetRecords([]api.DNSRecord{bad, v6, record("ns", "ok", "ok-a", "10.0.0.2", api.DNSPort{Name: "p", Port: 0, Protocol: "tcp"})}, 1)
	for _, tc := range []struct {
		name  string
		qtype uint16
		want  int
	}{
		{"web.ns.kat.test.", dns.TypeA, dns.RcodeNameError},
		{"v6.ns.kat.test.", dns.TypeA, dns.RcodeNameError},
		{"ok.ns.kat.test.", dns.TypeA, dns.RcodeSuccess},
		{"_p._tcp.ok.ns.kat.test.", dns.TypeSRV, dns.RcodeNameError},
	} {
		if got := h.Answer(t.Context(), query(tc.name, tc.qtype), netip.Addr{}, false).Rcode; got != tc.want {
			t.Errorf("%s: rcode %s, want %s", tc.name, dns.RcodeToString[got], dns.RcodeToString[tc.want])
		}
	}
}
