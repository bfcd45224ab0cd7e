package dnsserver

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"kat.dws.rip/kat/api"
)

// benchZone is a cluster's names: 5 namespaces of 20 workloads of 3
// instances, each with a named TCP port.
func benchZone() []api.DNSRecord {
	var recs []api.DNSRecord
	for ns := range 5 {
		for w := range 20 {
			for i := range 3 {
				recs = append(recs, record(fmt.Sprintf("ns%d", ns), fmt.Sprintf("w%d", w), fmt.Sprintf("w%d-%d", w, i),
					fmt.Sprintf("10.90.%d.%d", ns*20+w, i+2), httpPort))
			}
		}
	}
	return recs
}

// benchQueries is dnsperf's query file: 100 lines of service A, instance
// A, SRV, short names, NXDOMAIN and NODATA in the cluster domain, and a
// forwarded name.
func benchQueries() string {
	var b strings.Builder
	for i := range 100 {
		ns, w := i%5, i%20
		switch i % 10 {
		case 0, 1, 2:
			fmt.Fprintf(&b, "w%d.ns%d.kat.test A\n", w, ns)
		case 3, 4:
			fmt.Fprintf(&b, "w%d-%d.w%d.ns%d.kat.test A\n", w, i%3, w, ns)
		case 5, 6:
			fmt.Fprintf(&b, "_http._tcp.w%d.ns%d.kat.test SRV\n", w, ns)
		case 7:
			fmt.Fprintf(&b, "w%d A\n", w) // short name, from a source of ns0
		case 8:
			fmt.Fprintf(&b, "nope%d.ns%d.kat.test A\n", i, ns)
		case 9:
			if i%20 == 9 {
				b.WriteString("ext.example A\n")
			} else {
				fmt.Fprintf(&b, "w%d.ns%d.kat.test AAAA\n", w, ns)
			}
		}
	}
	return b.String()
}

// BenchmarkDNSPerf runs dnsperf (one client, concurrency 4, 10 s) against
// the server on loopback answering benchZone, with a fake upstream behind
// it, and reports the queries per second, the average latency and the
// server's resident memory (this process). task bench:dns runs it.
func BenchmarkDNSPerf(b *testing.B) {
	perf, err := exec.LookPath("dnsperf")
	if err != nil {
		b.Skip("dnsperf is not installed (Debian package dnsperf; scripts/install-prereqs.sh installs it)")
	}
	up := startUpstream(b)
	src := &SourceMap{}
	src.Set(map[netip.Addr]string{netip.MustParseAddr("127.0.0.1"): "ns0"})
	h := NewHandler(HandlerConfig{Domain: testDomain, Upstreams: []string{up.addr}, Sources: src})
	h.SetRecords(benchZone(), 1)
	addr := startServer(b, h)
	file := filepath.Join(b.TempDir(), "queries")
	if err := os.WriteFile(file, []byte(benchQueries()), 0o600); err != nil {
		b.Fatal(err)
	}
	// The query file resolves as meant: no SERVFAIL, no REFUSED.
	for _, line := range strings.Split(strings.TrimSpace(benchQueries()), "\n") {
		name, typ, _ := strings.Cut(line, " ")
		m := h.Answer(b.Context(), query(dns.Fqdn(name), dns.StringToType[typ]), netip.MustParseAddr("127.0.0.1"), false)
		if m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
			b.Fatalf("%s: %s", line, dns.RcodeToString[m.Rcode])
		}
	}
	// The floor, measured in the same run: a bare miekg server that
	// answers every query with one precomputed A record.
	floorRR := []dns.RR{aRecord("floor.", netip.MustParseAddr("10.0.0.1"))}
	floorAddr := startServer(b, dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = floorRR
		_ = w.WriteMsg(m)
	}))
	b.ResetTimer()
	for range b.N {
		floor := runDNSPerf(b, perf, floorAddr, file)
		got := runDNSPerf(b, perf, addr, file)
		b.ReportMetric(got.qps, "qps")
		b.ReportMetric(got.qps/floor.qps, "ratio-to-floor")
		b.ReportMetric(got.latency*1000, "ms-avg-latency")
		b.ReportMetric(got.lost, "lost")
		rss, hwm := procStatusKiB(b, "VmRSS"), procStatusKiB(b, "VmHWM")
		b.ReportMetric(rss/1024, "MiB-rss")
		b.Logf("dnsperf -c 4 -l 10: KAT's server %.0f qps, %.3f ms average latency, %.0f lost; bare miekg floor %.0f qps, %.3f ms (ratio %.2f); process RSS %.1f MiB (peak %.1f MiB); upstream asked %d times",
			got.qps, got.latency*1000, got.lost, floor.qps, floor.latency*1000, got.qps/floor.qps, rss/1024, hwm/1024, up.queries.Load())
	}
}

// perfResult is what dnsperf measured.
type perfResult struct{ qps, latency, lost float64 }

// runDNSPerf runs dnsperf from one client at concurrency 4 for 10 s
// against addr with the query file.
func runDNSPerf(b *testing.B, perf, addr, file string) perfResult {
	b.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.CommandContext(b.Context(), perf, "-s", host, "-p", port, "-d", file, "-c", "4", "-l", "10").CombinedOutput() //nolint:gosec // the test's own arguments
	if err != nil {
		b.Fatalf("dnsperf: %v\n%s", err, out)
	}
	return perfResult{
		qps:     perfFigure(b, out, `Queries per second:\s+([0-9.]+)`),
		latency: perfFigure(b, out, `Average Latency \(s\):\s+([0-9.]+)`),
		lost:    perfFigure(b, out, `Queries lost:\s+([0-9]+)`),
	}
}

func perfFigure(b *testing.B, out []byte, re string) float64 {
	b.Helper()
	m := regexp.MustCompile(re).FindSubmatch(out)
	if m == nil {
		b.Fatalf("dnsperf output lacks %s:\n%s", re, out)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// procStatusKiB reads a kB field of /proc/self/status.
func procStatusKiB(b *testing.B, field string) float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
