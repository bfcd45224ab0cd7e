package dnsserver

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"kat.dws.rip/kat/api"
)

// Time to live of the answers the zone gives: short, as instances move.
const (
	// RecordTTL is the TTL of A and SRV answers.
	RecordTTL = 5
	// NegativeTTL is the SOA's TTL and minimum: how long resolvers cache
	// NXDOMAIN and NODATA.
	NegativeTTL = 5
)

// Zone is an immutable set of answers for one cluster domain, built once
// from the DNS records and shared by every query until the next records
// replace it. Its RRs are never changed after NewZone.
type Zone struct {
	// origin is the cluster domain, lowercased, fully qualified.
	origin string
	soa    []dns.RR
	names  map[string]*zoneName
	// turn rotates multi-record answers between queries.
	turn atomic.Uint32
}

// zoneName is what exists at one name: an empty one is an empty
// non-terminal (a parent of names that exist), which answers NODATA.
type zoneName struct {
	// a and srv hold their records twice in a row, so rotation k of n
	// records is a[k:k+n] without copying.
	a, srv []dns.RR
	// extra are the A records of the SRV targets.
	extra []dns.RR
	// soa marks the zone's apex.
	soa bool
}

// rotation returns the k-th rotation of a doubled RR list.
func rotation(rrs []dns.RR, k uint32) []dns.RR {
	n := len(rrs) / 2
	if n <= 1 {
		return rrs[:n]
	}
	i := int(k % uint32(n)) //nolint:gosec // n is a positive count of records
	return rrs[i : i+n]
}

// NewZone builds the zone of domain from the records of its ready
// instances; records of names that are not valid DNS labels are left out.
// serial is the SOA serial (the etcd revision of the records).
func NewZone(domain string, records []api.DNSRecord, serial uint32) *Zone {
	origin := dns.CanonicalName(domain)
	z := &Zone{origin: origin, names: map[string]*zoneName{}}
	z.soa = []dns.RR{&dns.SOA{
		Hdr: dns.RR_Header{Name: origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: NegativeTTL},
		Ns:  "ns.dns." + origin, Mbox: "hostmaster." + origin,
		Serial: serial, Refresh: 60, Retry: 10, Expire: 3600, Minttl: NegativeTTL,
	}}
	z.at(origin).soa = true
	recs := slices.Clone(records)
	slices.SortFunc(recs, func(a, b api.DNSRecord) int {
		return strings.Compare(a.Namespace+"/"+a.Workload+"/"+a.InstanceID, b.Namespace+"/"+b.Workload+"/"+b.InstanceID)
	})
	for _, r := range recs {
		if !r.IP.Is4() || !isLabel(r.Namespace) || !isLabel(r.Workload) || !isLabel(r.InstanceID) {
			continue
		}
		service := strings.ToLower(r.Workload + "." + r.Namespace + "." + origin)
		instance := strings.ToLower(r.InstanceID) + "." + service
		z.add(service, aRecord(service, r.IP))
		inst := aRecord(instance, r.IP)
		z.add(instance, inst)
		for _, p := range r.Ports {
			proto := strings.ToLower(p.Protocol)
			if !isLabel(p.Name) || (proto != "tcp" && proto != "udp") || p.Port < 1 || p.Port > 65535 {
				continue
			}
			name := "_" + strings.ToLower(p.Name) + "._" + proto + "." + service
			zn := z.add(name, &dns.SRV{
				Hdr:      dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: RecordTTL},
				Priority: 0, Weight: 10, Port: uint16(p.Port), Target: instance,
			})
			zn.extra = append(zn.extra, inst)
		}
	}
	for _, zn := range z.names {
		zn.a = append(zn.a, zn.a...)
		zn.srv = append(zn.srv, zn.srv...)
	}
	return z
}

// add records rr at name and makes every name between it and the origin
// exist; it returns name's entry.
func (z *Zone) add(name string, rr dns.RR) *zoneName {
	zn := z.at(name)
	switch rr.Header().Rrtype {
	case dns.TypeA:
		zn.a = append(zn.a, rr)
	case dns.TypeSRV:
		zn.srv = append(zn.srv, rr)
	}
	for p := name; p != z.origin; {
		i := strings.IndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[i+1:]
		z.at(p)
	}
	return zn
}

// at returns name's entry, making it.
func (z *Zone) at(name string) *zoneName {
	zn := z.names[name]
	if zn == nil {
		zn = &zoneName{}
		z.names[name] = zn
	}
	return zn
}

func aRecord(name string, ip netip.Addr) dns.RR {
	b := ip.As4()
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: RecordTTL}, A: b[:]}
}

// isLabel reports whether s can be one DNS label of a name.
func isLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// Contains reports whether name (lowercased, fully qualified) is the
// zone's origin or below it.
func (z *Zone) Contains(name string) bool { return dns.IsSubDomain(z.origin, name) }

// Origin is the zone's cluster domain, lowercased and fully qualified.
func (z *Zone) Origin() string { return z.origin }

// answer is what the zone says to one question.
type answer struct {
	rcode             int
	answer, ns, extra []dns.RR
}

// lookup answers a question of class IN for name (lowercased, fully
// qualified, inside the zone). exists is false for a name the zone does
// not hold (the answer is then NXDOMAIN).
func (z *Zone) lookup(name string, qtype uint16) (a answer, exists bool) {
	zn := z.names[name]
	if zn == nil {
		return answer{rcode: dns.RcodeNameError, ns: z.soa}, false
	}
	var rrs []dns.RR
	switch qtype {
	case dns.TypeA:
		rrs = rotation(zn.a, z.turn.Add(1))
	case dns.TypeSRV:
		if len(zn.srv) > 0 {
			rrs = rotation(zn.srv, z.turn.Add(1))
			a.extra = zn.extra
		}
	case dns.TypeSOA:
		if zn.soa {
			rrs = z.soa
		}
	}
	if len(rrs) == 0 {
		return answer{rcode: dns.RcodeSuccess, ns: z.soa}, true
	}
	a.answer = rrs
	return a, true
}
