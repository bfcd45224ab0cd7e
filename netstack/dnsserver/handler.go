package dnsserver

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
)

// maxUDPSize caps UDP answers whatever buffer the client offers: the EDNS0
// size that avoids fragmentation (DNS flag day 2020), which also bounds
// what a spoofed query can make the server send.
const maxUDPSize = 1232

// Namespaces tells which namespace a query's source address belongs to:
// the agent knows the overlay addresses of the instances it runs.
type Namespaces interface {
	// NamespaceOf returns the namespace of the instance at ip.
	NamespaceOf(ip netip.Addr) (string, bool)
}

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Domain is the cluster domain (cluster.kat's clusterDomain). Required.
	Domain string
	// Upstreams are the resolvers ("host:port") names outside Domain are
	// forwarded to, tried in order. Default none: such names get SERVFAIL.
	Upstreams []string
	// Sources maps a query's source address to its namespace for short
	// names. Default none: names are taken as they are.
	Sources Namespaces
	// Timeout bounds one exchange with an upstream. Default 2 s.
	Timeout time.Duration
	// CacheSize bounds the forwarded answers kept. Default 10000.
	CacheSize int
	// Now replaces time.Now for the cache, in tests.
	Now    func() time.Time
	Logger zerolog.Logger
}

// Handler answers DNS queries: from its zone for the cluster domain, by
// forwarding for other names. It is a dns.Handler; its zone is swapped
// atomically by SetZone while queries run.
type Handler struct {
	cfg  HandlerConfig
	zone atomic.Pointer[Zone]
	fwd  *forwarder
}

// NewHandler returns a handler with an empty zone of cfg.Domain.
func NewHandler(cfg HandlerConfig) *Handler {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &Handler{cfg: cfg, fwd: newForwarder(cfg.Upstreams, cfg.Timeout, cfg.CacheSize, cfg.Now)}
	h.zone.Store(NewZone(cfg.Domain, nil, 0))
	return h
}

// Domain is the handler's cluster domain, as configured.
func (h *Handler) Domain() string { return h.cfg.Domain }

// SetRecords replaces the zone by one built from records, serial being
// their etcd revision.
func (h *Handler) SetRecords(records []api.DNSRecord, serial uint32) {
	h.zone.Store(NewZone(h.cfg.Domain, records, serial))
}

// Zone returns the zone the handler answers from now.
func (h *Handler) Zone() *Zone { return h.zone.Load() }

// ServeDNS answers one query received by a dns.Server.
func (h *Handler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	var src netip.Addr
	tcp := false
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		src = addrOf(a.IP)
	case *net.TCPAddr:
		src, tcp = addrOf(a.IP), true
	}
	// Only forwarding waits, each exchange bounded by the upstream
	// timeout: no per-query deadline to pay for on zone answers.
	_ = w.WriteMsg(h.Answer(context.Background(), r, src, tcp))
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// Answer returns the reply to query r from source address src, received
// over TCP or not (UDP): its size fits the client's buffer, cut with TC
// set when it does not.
func (h *Handler) Answer(ctx context.Context, r *dns.Msg, src netip.Addr, tcp bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	switch {
	case r.Response || r.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
		m.Question = nil
	case len(r.Question) != 1:
		m.Rcode = dns.RcodeFormatError
		m.Question = nil
	default:
		h.answerQuestion(ctx, m, r.Question[0], src)
	}
	return fit(m, r, tcp)
}

// answerQuestion fills m with the answer to q.
func (h *Handler) answerQuestion(ctx context.Context, m *dns.Msg, q dns.Question, src netip.Addr) {
	switch {
	case q.Qclass != dns.ClassINET:
		m.Rcode = dns.RcodeRefused
		return
	case q.Qtype == dns.TypeANY || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR:
		m.Rcode = dns.RcodeRefused
		return
	}
	name := dns.CanonicalName(q.Name)
	z := h.zone.Load()
	if !z.Contains(name) {
		if h.cfg.Sources != nil && src.IsValid() {
			if ns, ok := h.cfg.Sources.NamespaceOf(src); ok {
				if a, exists := z.lookup(name+ns+"."+z.origin, q.Qtype); exists {
					a.answer = renamed(a.answer, q.Name)
					fill(m, a)
					return
				}
			}
		}
		h.forward(ctx, m, q)
		return
	}
	a, _ := z.lookup(name, q.Qtype)
	m.Authoritative = true
	fill(m, a)
}

// fill puts a zone answer into m. The zone's slices are shared by every
// query: m gets its own copies of the slices (never of the RRs) so that
// nothing appended to m reaches the zone.
func fill(m *dns.Msg, a answer) {
	m.Rcode = a.rcode
	m.Answer = a.answer[:len(a.answer):len(a.answer)]
	m.Ns = a.ns[:len(a.ns):len(a.ns)]
	if len(a.extra) > 0 {
		m.Extra = append(make([]dns.RR, 0, len(a.extra)+1), a.extra...)
	}
}

// renamed returns copies of rrs owned by name: the answer to a short name
// names what was asked.
func renamed(rrs []dns.RR, name string) []dns.RR {
	out := make([]dns.RR, len(rrs))
	for i, rr := range rrs {
		c := dns.Copy(rr)
		c.Header().Name = name
		out[i] = c
	}
	return out
}

// forward fills m with the upstreams' answer to q, or SERVFAIL.
func (h *Handler) forward(ctx context.Context, m *dns.Msg, q dns.Question) {
	resp, err := h.fwd.forward(ctx, q)
	if err != nil {
		h.cfg.Logger.Debug().Err(err).Str("name", q.Name).Msg("forwarding failed")
		m.Rcode = dns.RcodeServerFailure
		return
	}
	m.Rcode = resp.Rcode
	m.Answer, m.Ns, m.Extra = resp.Answer, resp.Ns, resp.Extra
}

// fit sizes m for the client of r: an EDNS0 client gets an OPT record and
// at most its buffer size (up to maxUDPSize) over UDP; another gets 512
// bytes over UDP; TCP gets up to 64 KiB. What does not fit is cut and TC
// set.
func fit(m, r *dns.Msg, tcp bool) *dns.Msg {
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		if !tcp {
			size = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxUDPSize)
		}
		if len(m.Extra) > 0 {
			m.Extra = append(make([]dns.RR, 0, len(m.Extra)+1), m.Extra...)
		}
		m.SetEdns0(maxUDPSize, false)
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			m.Answer, m.Ns, m.Extra = nil, nil, m.Extra[len(m.Extra)-1:]
		}
	}
	if tcp {
		size = dns.MaxMsgSize
	}
	m.Truncate(size)
	return m
}
