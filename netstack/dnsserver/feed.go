package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// DefaultResync is how often a feed lists its keys again from scratch.
const DefaultResync = 10 * time.Minute

// Retry delays of a feed whose listing or watch failed.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// FeedZone keeps h's zone in line with the DNS records of its cluster
// domain until ctx ends, and returns nil then. It lists the records and
// watches them from the listing's revision (store.Cache: a watch that
// falls behind a compaction lists again), builds a new zone after every
// change (bursts coalesce) and swaps it in at once; every resync (default
// DefaultResync) and after a failure (retried with a capped backoff) it
// starts over from a new listing. Records that do not decode are left
// out.
func FeedZone(ctx context.Context, st store.StateStore, h *Handler, resync time.Duration, log zerolog.Logger) error {
	decode := func(kv store.KV) (api.DNSRecord, bool) {
		d, err := resources.DecodeDNSRecord(kv)
		if err != nil {
			log.Warn().Err(err).Msg("dns record left out")
		}
		return d, err == nil
	}
	return follow(ctx, st, resources.DNSDomainPrefix(h.Domain()), decode, resync, log,
		func(items map[string]api.DNSRecord, rev int64) {
			recs := make([]api.DNSRecord, 0, len(items))
			for _, d := range items {
				recs = append(recs, d)
			}
			h.SetRecords(recs, uint32(rev)) //nolint:gosec // a serial wraps around by design (RFC 1982)
			log.Debug().Int("records", len(recs)).Int64("revision", rev).Msg("dns zone updated")
		})
}

// SourceMap is a Namespaces the agent keeps: the namespace of each of its
// instances' overlay addresses. It is safe for concurrent use.
type SourceMap struct {
	m atomic.Pointer[map[netip.Addr]string]
}

// Set replaces the map.
func (s *SourceMap) Set(m map[netip.Addr]string) { s.m.Store(&m) }

// NamespaceOf returns the namespace of the instance at ip.
func (s *SourceMap) NamespaceOf(ip netip.Addr) (string, bool) {
	m := s.m.Load()
	if m == nil {
		return "", false
	}
	ns, ok := (*m)[ip]
	return ns, ok
}

var _ Namespaces = (*SourceMap)(nil)

// FeedSources keeps src in line with the addresses of node's assignments
// until ctx ends, as FeedZone does the zone.
func FeedSources(ctx context.Context, st store.StateStore, node string, src *SourceMap, resync time.Duration, log zerolog.Logger) error {
	decode := func(kv store.KV) (api.Assignment, bool) {
		a, err := resources.DecodeAssignment(kv.Value)
		return a, err == nil && a.IP.IsValid()
	}
	return follow(ctx, st, resources.NodeAssignmentsPrefix(node), decode, resync, log,
		func(items map[string]api.Assignment, _ int64) {
			m := make(map[netip.Addr]string, len(items))
			for _, a := range items {
				m[a.IP] = a.Namespace
			}
			src.Set(m)
		})
}

// follow calls apply with every key under prefix, decoded, and the
// revision they are at, after the first listing and after every change,
// until ctx ends; it starts over every resync and after a failure.
func follow[T any](ctx context.Context, st store.StateStore, prefix string, decode func(store.KV) (T, bool),
	resync time.Duration, log zerolog.Logger, apply func(map[string]T, int64)) error {
	if resync <= 0 {
		resync = DefaultResync
	}
	delay := minRetry
	for ctx.Err() == nil {
		err := followOnce(ctx, st, prefix, decode, resync, apply)
		if err == nil {
			delay = minRetry
			continue
		}
		if ctx.Err() != nil {
			break
		}
		log.Warn().Err(err).Str("prefix", prefix).Dur("retry_in", delay).Msg("dns feed failed")
		sleep(ctx, delay)
		delay = min(2*delay, maxRetry)
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// errWatchEnded means a feed's watch stopped while its context had not.
var errWatchEnded = errors.New("dnsserver: watch ended")

// followOnce runs one cache of prefix until ctx ends or resync passes
// (nil), or the cache fails.
func followOnce[T any](ctx context.Context, st store.StateStore, prefix string, decode func(store.KV) (T, bool),
	resync time.Duration, apply func(map[string]T, int64)) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := store.NewCache(st, prefix, decode)
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(cctx, func(string) {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}()
	// stop ends the cache and returns what its Run did: nil, unless it
	// failed meanwhile.
	stop := func() error { cancel(); return <-done }
	select {
	case <-c.Synced():
	case err := <-done:
		if err == nil {
			err = errWatchEnded
		}
		return fmt.Errorf("list %s: %w", prefix, err)
	case <-ctx.Done():
		return stop()
	}
	timer := time.NewTimer(resync)
	defer timer.Stop()
	last := int64(-1)
	for {
		if rev := c.Revision(); rev != last {
			items, rev := c.Snapshot()
			apply(items, rev)
			last = rev
		}
		select {
		case <-ctx.Done():
			return stop()
		case <-timer.C:
			return stop()
		case err := <-done:
			if err == nil {
				err = errWatchEnded
			}
			return fmt.Errorf("watch %s: %w", prefix, err)
		case <-wake:
		}
	}
}

// WaitNodeNetwork returns node's overlay record once it has a subnet (the
// leader gives it one when the node joins), watching
// /kat/network/nodes/{node}/; it returns ctx's error when ctx ends first.
func WaitNodeNetwork(ctx context.Context, st store.StateStore, node string, log zerolog.Logger) (api.NodeNetwork, error) {
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var found *api.NodeNetwork
	raw := func(kv store.KV) (store.KV, bool) { return kv, true }
	_ = follow(fctx, st, resources.NodeNetworkPrefix(node), raw, 0, log, func(items map[string]store.KV, _ int64) {
		nets, err := resources.DecodeNodeNetworks(slices.Collect(maps.Values(items)))
		if err == nil && len(nets) == 1 && nets[0].Subnet.IsValid() {
			found = &nets[0]
			cancel()
		}
	})
	if found == nil {
		return api.NodeNetwork{}, fmt.Errorf("wait for the overlay network of node %q: %w", node, ctx.Err())
	}
	return *found, nil
}
