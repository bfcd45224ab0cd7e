package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// dnsReadyOf returns the assignments of workload key whose instances
// belong in DNS and behind an ingress route (DNSReady), and every assignment
// of it. nodeReady caches the nodes' readiness at now for one pass.
func (v *view) dnsReadyOf(key string, nodeReady map[string]bool, now time.Time) (live, all []api.Assignment) {
	all = v.assignmentsOf(key)
	reports := v.reportsOf(all)
	for _, a := range all {
		ready, seen := nodeReady[a.Node]
		if !seen {
			ready = v.nodeReady(a.Node, now)
			nodeReady[a.Node] = ready
		}
		var rep *api.InstanceStatus
		if r, ok := reports[a.InstanceID]; ok {
			rep = &r
		}
		if DNSReady(a, rep, ready) {
			live = append(live, a)
		}
	}
	return live, all
}

// DNSReady reports whether the instance of assignment a belongs in DNS:
// it has an overlay address, is not leaving (a rollout or scale-down set
// its LeavingAt: it waits out the drain delay out of DNS), its node is Ready and its
// last report says it runs and is healthy (or has no health check). It is
// the one rule of the records loop.
func DNSReady(a api.Assignment, report *api.InstanceStatus, nodeReady bool) bool {
	return a.IP.Is4() && a.LeavingAt.IsZero() && nodeReady && report != nil && report.Ready()
}

// DNSRecordOf is the record of the instance of assignment a, with its
// named ports.
func DNSRecordOf(a api.Assignment, ports []api.DNSPort) api.DNSRecord {
	return api.DNSRecord{
		Namespace: a.Namespace, Workload: a.Workload, InstanceID: a.InstanceID, Node: a.Node, IP: a.IP, Ports: ports,
	}
}

// DiffDNSRecords returns what to write so that the records have (by key)
// become want under the cluster domain domain: the records to put (new or
// changed) and the keys to delete, both sorted. It is pure.
func DiffDNSRecords(domain string, want []api.DNSRecord, have map[string]api.DNSRecord) (put []api.DNSRecord, del []string) {
	key := func(d api.DNSRecord) string { return resources.DNSKey(domain, d.Namespace, d.Workload, d.InstanceID) }
	keep := make(map[string]bool, len(want))
	for _, d := range want {
		k := key(d)
		keep[k] = true
		if old, ok := have[k]; !ok || !old.Equal(d) {
			put = append(put, d)
		}
	}
	for k := range have {
		if !keep[k] {
			del = append(del, k)
		}
	}
	slices.SortFunc(put, func(a, b api.DNSRecord) int { return strings.Compare(key(a), key(b)) })
	slices.Sort(del)
	return put, del
}

// dnsPortsOf returns the named ports of a parsed workload's
// VirtualLoadBalancer.kat, lowercased, in file order.
func dnsPortsOf(q *quadlet.Quadlet) []api.DNSPort {
	if q.LoadBalancer == nil {
		return nil
	}
	var out []api.DNSPort
	for _, p := range q.LoadBalancer.Spec.Ports {
		if p.Name == "" {
			continue
		}
		out = append(out, api.DNSPort{
			Name: strings.ToLower(p.Name), Port: p.ContainerPort, Protocol: strings.ToLower(p.Protocol),
		})
	}
	return out
}

// dnsRecords is the records loop: it keeps /kat/dns/{clusterDomain}/ in
// line with the ready instances. It reads the view (assignments, instance
// reports, node readiness) and its own cache of the records, and writes
// only the difference.
type dnsRecords struct {
	l      *Leader
	domain string
	cache  *store.Cache[api.DNSRecord]

	mu sync.Mutex
	// byWorkload is, by workload "ns/name", the keys of its records under
	// domain; foreign holds the keys under another domain (a changed
	// clusterDomain), which a full pass deletes. Kept by the cache's hook.
	byWorkload map[string]map[string]struct{}
	foreign    map[string]struct{}
	// ports are the named ports of each spec hash; only the loop uses it.
	ports map[string][]api.DNSPort
}

func newDNSRecords(l *Leader) *dnsRecords {
	d := &dnsRecords{
		l: l, domain: strings.ToLower(l.cfg.ClusterDomain),
		byWorkload: map[string]map[string]struct{}{}, foreign: map[string]struct{}{}, ports: map[string][]api.DNSPort{},
	}
	d.cache = store.NewCache(l.cfg.Repo.Store(), resources.DNSPrefix(), decodeDNSRecord)
	d.cache.SetIndex(d.recordChanged)
	return d
}

// decodeDNSRecord keeps every key under the DNS prefix, even one that does
// not decode (as a zero record), so the loop can delete it.
func decodeDNSRecord(kv store.KV) (api.DNSRecord, bool) {
	var d api.DNSRecord
	_ = json.Unmarshal(kv.Value, &d)
	return d, true
}

// recordChanged is the records cache's hook.
func (d *dnsRecords) recordChanged(key string, _, new *api.DNSRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	domain, ns, wl, _, ok := resources.ParseDNSKey(key)
	if !ok || domain != d.domain {
		if new != nil {
			d.foreign[key] = struct{}{}
		} else {
			delete(d.foreign, key)
		}
		return
	}
	if new != nil {
		addKey(d.byWorkload, ns+"/"+wl, key)
	} else {
		removeKey(d.byWorkload, ns+"/"+wl, key)
	}
}

// run runs the records cache and the loop until ctx ends. The loop is woken
// by changes of assignments, instance reports and nodes' readiness, and
// goes over every workload on start and every Resync.
func (d *dnsRecords) run(ctx context.Context, sub *subscription) error {
	return runWithCache(ctx, d.l, d.cache, sub, "dns", d.once)
}

// runWithCache runs the cache of a loop's own records and, once it has
// synced, the loop, until ctx ends.
func runWithCache[T any](ctx context.Context, l *Leader, cache *store.Cache[T], sub *subscription, name string,
	pass func(ctx context.Context, keys []string) error,
) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return cache.Run(gctx, nil) })
	g.Go(func() error {
		select {
		case <-cache.Synced():
		case <-gctx.Done():
			return nil
		}
		return l.loop(gctx, sub, name, pass)
	})
	return g.Wait()
}

// once brings the records of the workloads keys (every workload with
// assignments or records when keys is nil) in line with their ready
// instances, writes the difference in transactions of up to 100 changes,
// and waits until the cache holds the write.
func (d *dnsRecords) once(ctx context.Context, keys []string) error {
	full := keys == nil
	var del []string
	d.mu.Lock()
	if full {
		keys = append(d.l.view.assignedKeys(), slices.Collect(maps.Keys(d.byWorkload))...)
		slices.Sort(keys)
		keys = slices.Compact(keys)
		del = slices.Sorted(maps.Keys(d.foreign))
	}
	have := map[string]api.DNSRecord{}
	for _, k := range keys {
		for key := range d.byWorkload[k] {
			have[key], _ = d.cache.Get(key)
		}
	}
	d.mu.Unlock()
	now := d.l.cfg.Now()
	ready := map[string]bool{}
	inUse := map[string]bool{}
	var want []api.DNSRecord
	for _, k := range keys {
		live, as := d.l.view.dnsReadyOf(k, ready, now)
		for _, a := range as {
			inUse[a.SpecHash] = true
		}
		for _, a := range live {
			want = append(want, DNSRecordOf(a, d.portsOf(a)))
		}
	}
	if full {
		for h := range d.ports {
			if !inUse[h] {
				delete(d.ports, h)
			}
		}
	}
	put, stale := DiffDNSRecords(d.domain, want, have)
	del = append(del, stale...)
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	rev, err := d.l.cfg.Repo.WriteDNSRecords(ctx, d.domain, put, del)
	if err != nil {
		return err
	}
	d.l.cfg.Logger.Info().Str("component", "dns").Int("put", len(put)).Int("removed", len(del)).Msg("dns records written")
	return d.cache.WaitRevision(ctx, rev)
}

// portsOf returns the named ports of assignment a's spec, parsed once per
// spec hash; a spec that does not parse has none.
func (d *dnsRecords) portsOf(a api.Assignment) []api.DNSPort {
	if p, ok := d.ports[a.SpecHash]; ok {
		return p
	}
	q, err := quadlet.ParseWorkload(a.Files, quadlet.ParseOptions{DefaultNamespace: a.Namespace})
	var p []api.DNSPort
	if err != nil {
		d.l.cfg.Logger.Warn().Str("component", "dns").Err(fmt.Errorf("parse the spec of instance %s: %w", a.InstanceID, err)).
			Msg("no SRV records for the instance")
	} else {
		p = dnsPortsOf(q)
	}
	d.ports[a.SpecHash] = p
	return p
}
