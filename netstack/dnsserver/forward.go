package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"
)

// Bounds of the forwarding cache's lifetimes.
const (
	maxPositiveTTL = 30 * time.Second
	maxNegativeTTL = 5 * time.Second
)

// errNoUpstream means no upstream resolver is configured.
var errNoUpstream = errors.New("dnsserver: no upstream resolver")

// forwarder asks the upstream resolvers, through a bounded cache; one
// question in flight is asked once however many clients ask it.
type forwarder struct {
	upstreams []string
	udp, tcp  *dns.Client
	cache     *answerCache
	flight    singleflight.Group
	now       func() time.Time
}

func newForwarder(upstreams []string, timeout time.Duration, size int, now func() time.Time) *forwarder {
	return &forwarder{
		upstreams: upstreams,
		udp:       &dns.Client{Net: "udp", Timeout: timeout},
		tcp:       &dns.Client{Net: "tcp", Timeout: timeout},
		cache:     &answerCache{max: size, m: map[cacheKey]*cacheEntry{}},
		now:       now,
	}
}

// forward returns the answer to q: the cache's, or the first upstream's
// that answers (neither SERVFAIL nor REFUSED), cached for its lifetime.
// The message returned is the caller's.
func (f *forwarder) forward(ctx context.Context, q dns.Question) (*dns.Msg, error) {
	key := cacheKey{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass}
	now := f.now()
	if m, ok := f.cache.get(key, now); ok {
		return m, nil
	}
	if len(f.upstreams) == 0 {
		return nil, errNoUpstream
	}
	flightKey := key.name + "/" + strconv.Itoa(int(key.qtype)) + "/" + strconv.Itoa(int(key.qclass))
	v, err, _ := f.flight.Do(flightKey, func() (any, error) {
		resp, err := f.exchange(ctx, q)
		if err != nil {
			return nil, err
		}
		if ttl := cacheTTL(resp); ttl > 0 {
			f.cache.put(key, resp, f.now(), ttl)
		}
		return resp, nil
	})
	if err != nil {
		return nil, err
	}
	// Every caller of the flight gets its own copy.
	return v.(*dns.Msg).Copy(), nil
}

// exchange asks each upstream in turn, over TCP again when the UDP answer
// was truncated, and returns the first answer, without its OPT record.
func (f *forwarder) exchange(ctx context.Context, q dns.Question) (*dns.Msg, error) {
	req := new(dns.Msg)
	req.Id = dns.Id()
	req.RecursionDesired = true
	req.Question = []dns.Question{q}
	req.SetEdns0(4096, false)
	var errs []error
	for _, up := range f.upstreams {
		resp, _, err := f.udp.ExchangeContext(ctx, req, up)
		if err == nil && resp.Truncated {
			resp, _, err = f.tcp.ExchangeContext(ctx, req, up)
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("ask %s: %w", up, err))
			continue
		case resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused:
			errs = append(errs, fmt.Errorf("ask %s: %s", up, dns.RcodeToString[resp.Rcode]))
			continue
		}
		resp.Extra = withoutOPT(resp.Extra)
		return resp, nil
	}
	return nil, fmt.Errorf("forward %s %s: %w", q.Name, dns.TypeToString[q.Qtype], errors.Join(errs...))
}

func withoutOPT(rrs []dns.RR) []dns.RR {
	out := rrs[:0:0]
	for _, rr := range rrs {
		if _, ok := rr.(*dns.OPT); !ok {
			out = append(out, rr)
		}
	}
	return out
}

// cacheTTL is how long an upstream answer may be kept: the smallest TTL
// of its answers up to 30 s; for a negative answer (NXDOMAIN, or no
// answer) the SOA's TTL and minimum up to 5 s, 5 s without SOA; 0 (not
// cached) for other failures.
func cacheTTL(m *dns.Msg) time.Duration {
	switch {
	case m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0:
		ttl := maxPositiveTTL
		for _, rr := range m.Answer {
			ttl = min(ttl, time.Duration(rr.Header().Ttl)*time.Second)
		}
		return ttl
	case m.Rcode == dns.RcodeSuccess || m.Rcode == dns.RcodeNameError:
		ttl := maxNegativeTTL
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				ttl = min(ttl, time.Duration(soa.Hdr.Ttl)*time.Second, time.Duration(soa.Minttl)*time.Second)
			}
		}
		return ttl
	}
	return 0
}

// cacheKey is a question, its name lowercased.
type cacheKey struct {
	name          string
	qtype, qclass uint16
}

type cacheEntry struct {
	msg             *dns.Msg
	stored, expires time.Time
}

// answerCache holds up to max upstream answers; when full, it drops the
// expired ones, else an arbitrary one.
type answerCache struct {
	mu  sync.Mutex
	max int
	m   map[cacheKey]*cacheEntry
}

// get returns a copy of the answer to key, its TTLs lowered by the time it
// has been kept.
func (c *answerCache) get(key cacheKey, now time.Time) (*dns.Msg, bool) {
	c.mu.Lock()
	e, ok := c.m[key]
	if ok && !now.Before(e.expires) {
		delete(c.m, key)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second) //nolint:gosec // an entry lives 30 s at most
	for _, sec := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range sec {
			h := rr.Header()
			h.Ttl -= min(h.Ttl, age)
		}
	}
	return m, true
}

func (c *answerCache) put(key cacheKey, m *dns.Msg, now time.Time, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		for k := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, k)
		}
	}
	c.m[key] = &cacheEntry{msg: m, stored: now, expires: now.Add(ttl)}
}

// len returns the number of answers held.
func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// HostUpstreams returns the resolvers ("ip:port") of a resolv.conf file
// (the host's is /etc/resolv.conf), leaving out the addresses in exclude:
// the node's own, where this server listens, so that it never asks itself.
func HostUpstreams(path string, exclude ...netip.Addr) ([]string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read resolvers from %s: %w", path, err)
	}
	var out []string
	for _, s := range cc.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		skip := false
		for _, x := range exclude {
			if a.WithZone("").Unmap() == x.Unmap() {
				skip = true
			}
		}
		if !skip {
			out = append(out, net.JoinHostPort(s, cc.Port))
		}
	}
	return out, nil
}
