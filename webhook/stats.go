package webhook

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"kat.dws.rip/kat/internal/metrics"
)

// Outcome is how one webhook request ended: accepted, ignored, or the reason
// it was rejected. Outcomes are metric labels, so their set is fixed.
type Outcome string

// Outcomes of a webhook request.
const (
	OutcomeAccepted          Outcome = "accepted"
	OutcomePing              Outcome = "ping"
	OutcomeIgnored           Outcome = "ignored_event"
	OutcomeRateLimited       Outcome = "rate_limited"
	OutcomeMethodNotAllowed  Outcome = "method_not_allowed"
	OutcomeUnknownProvider   Outcome = "unknown_provider"
	OutcomeTooLarge          Outcome = "too_large"
	OutcomeNoSecret          Outcome = "no_secret"
	OutcomeSecretUnavailable Outcome = "secret_unavailable"
	OutcomeMissingSignature  Outcome = "missing_signature"
	OutcomeBadSignature      Outcome = "bad_signature"
	OutcomeMalformed         Outcome = "malformed_payload"
	OutcomeNoMatch           Outcome = "no_matching_source"
	OutcomeDispatchFailed    Outcome = "dispatch_failed"
)

// Stats is a snapshot of the handler's counters.
type Stats struct {
	// Counts holds one entry per provider and outcome seen, sorted by
	// provider then outcome. An unknown provider is counted as "unknown".
	Counts []Count
	// LastAccepted is when the last push was accepted; zero if none was.
	LastAccepted time.Time
	// LastRejected is when the last request was rejected; zero if none was.
	LastRejected time.Time
}

// Count is how many requests of one provider ended with one outcome.
type Count struct {
	Provider string
	Outcome  Outcome
	N        uint64
}

// Get returns the count of provider and outcome, 0 if none.
func (s Stats) Get(provider string, outcome Outcome) uint64 {
	for _, c := range s.Counts {
		if c.Provider == provider && c.Outcome == outcome {
			return c.N
		}
	}
	return 0
}

type countKey struct {
	provider string
	outcome  Outcome
}

type counters struct {
	now          func() time.Time
	mu           sync.Mutex
	n            map[countKey]uint64
	lastAccepted time.Time
	lastRejected time.Time
}

func (c *counters) add(provider string, o Outcome) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[countKey]uint64)
	}
	c.n[countKey{provider, o}]++
	switch o {
	case OutcomeAccepted:
		c.lastAccepted = now
	case OutcomePing, OutcomeIgnored:
	default:
		c.lastRejected = now
	}
	metrics.Webhook(provider, string(o), o.Refused())
}

// Refused reports whether the request was refused (answered 4xx or 5xx);
// accepted pushes, pings and ignored events were not.
func (o Outcome) Refused() bool {
	return o != OutcomeAccepted && o != OutcomePing && o != OutcomeIgnored
}

// Stats returns a snapshot of the counts of every provider and outcome.
func (h *Handler) Stats() Stats {
	c := &h.stats
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{LastAccepted: c.lastAccepted, LastRejected: c.lastRejected}
	for k, n := range c.n {
		s.Counts = append(s.Counts, Count{Provider: k.provider, Outcome: k.outcome, N: n})
	}
	slices.SortFunc(s.Counts, func(a, b Count) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Outcome, b.Outcome))
	})
	return s
}
