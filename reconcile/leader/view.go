package leader

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// storedStatus is a workload's status as stored, with its version for a
// compare-and-swap.
type storedStatus struct {
	status  api.WorkloadStatus
	version int64
}

// view is the leader's in-memory copy of the facts its loops decide from,
// kept current by watches (store.Cache, resources.DesiredIndex), indexed by
// workload, and the parsed specs. A change of one workload's facts marks that
// workload dirty for the loops that read them, so a pass costs work on what
// changed only; each loop still goes over everything on start and every
// Resync (level-triggered). etcd stays the only state: a new term builds a
// new view from etcd.
type view struct {
	specs *specCache
	// desired is run by the view when ownDesired (no index was given).
	desired    *resources.DesiredIndex
	ownDesired bool
	assigns    *store.Cache[api.Assignment]
	nodes      *store.Cache[api.NodeStatus]
	apps       *store.Cache[api.AppSource]
	builds     *store.Cache[api.Build]
	sources    *store.Cache[api.SourceStatus]
	statuses   *store.Cache[storedStatus]
	regs       *store.Cache[api.NodeRegistration]
	beats      *store.Cache[api.NodeHeartbeat]
	jobs       *store.Cache[jobEntry]
	jobIdx     jobIndex
	rollouts   *store.Cache[api.Rollout]
	// subnets are the nodes' overlay subnets, by NodeSubnetKey; ipam the
	// instance holding each address, by IPAMKey.
	subnets *store.Cache[netip.Prefix]
	ipam    *store.Cache[string]
	// daemonRollouts are the DaemonServices' node-by-node update records,
	// which placement writes.
	daemonRollouts *store.Cache[api.DaemonRolloutRecord]
	// secrets are what may be shown of every secret (never its values),
	// by SecretKey: placement places no instance whose secret is missing.
	secrets *store.Cache[api.SecretInfo]
	// secretRefs are the secret references loop's records, which it
	// writes.
	secretRefs *store.Cache[api.SecretRef]
	// ingress are the ingress loop's records, which it writes and the
	// status reads (their conflicts).
	ingress *store.Cache[api.IngressRoutes]
	// certs are the ingress certificates (public parts and sealed keys),
	// by IngressCertificateKey: the ingress loop names the one each TLS
	// host serves.
	certs *store.Cache[api.IngressCertificate]

	// lossTimeout is the heartbeat age at which a node is NotReady; now
	// is the clock it is judged by.
	lossTimeout time.Duration
	now         func() time.Time
	// termStart is when the view was made: no node that heartbeat before
	// is lost until lossTimeout after it.
	termStart time.Time
	// beatWake is poked when a node registers, goes, or turns fresh (it
	// beats after being lost, or for the first time): the node-loss clock
	// then looks again for the next node to go NotReady. Another heartbeat
	// only moves its node's loss later, so the clock's next wake-up stays
	// early enough without one: a thousand nodes' beats do not make it
	// look at every node each time.
	beatWake chan struct{}

	mu   sync.Mutex
	subs []*subscription
	// scheduling is placement's last finding per workload, guarded by mu.
	scheduling map[string]Scheduling
	// wakes are, by workload, when placement asked for a pass (guarded by
	// mu); wakesChanged is poked when one is set.
	wakes        map[string]time.Time
	wakesChanged chan struct{}
	// placeFailures are, by workload, the placement passes that failed in
	// a row, this term or under the former leader (guarded by mu).
	placeFailures map[string]PlacementFailure
	// seeded takes the former leader's records once the caches synced.
	seeded sync.Once

	idx viewIndex
}

func newView(st store.StateStore, desired *resources.DesiredIndex, lossTimeout time.Duration, now func() time.Time) *view {
	v := &view{
		regs:        store.NewCache(st, resources.NodeRegistrationPrefix(), decodeJSON[api.NodeRegistration]),
		beats:       store.NewCache(st, resources.NodeHeartbeatPrefix(), decodeJSON[api.NodeHeartbeat]),
		lossTimeout: lossTimeout, now: now, termStart: now(), beatWake: make(chan struct{}, 1), scheduling: map[string]Scheduling{},
		wakes: map[string]time.Time{}, wakesChanged: make(chan struct{}, 1), placeFailures: map[string]PlacementFailure{},
		rollouts:       store.NewCache(st, resources.RolloutsPrefix(), decodeRollout),
		specs:          newSpecCache(),
		desired:        desired,
		assigns:        store.NewCache(st, resources.AssignmentsPrefix(), decodeJSON[api.Assignment]),
		nodes:          store.NewCache(st, resources.NodeStatusPrefix(), decodeJSON[api.NodeStatus]),
		apps:           store.NewCache(st, resources.AppSourcesPrefix(), decodeJSON[api.AppSource]),
		builds:         store.NewCache(st, resources.BuildsPrefix(), decodeJSON[api.Build]),
		sources:        store.NewCache(st, resources.SourcesPrefix(), decodeSourceStatus),
		statuses:       store.NewCache(st, resources.StatusPrefix(), decodeStatus),
		subnets:        store.NewCache(st, resources.NetworkNodesPrefix(), decodeSubnet),
		ipam:           store.NewCache(st, resources.IPAMPrefix(), func(kv store.KV) (string, bool) { return string(kv.Value), true }),
		daemonRollouts: store.NewCache(st, resources.DaemonRolloutPrefix(), decodeJSON[api.DaemonRolloutRecord]),
		ingress:        store.NewCache(st, resources.IngressRoutesPrefix(), keepEveryKey(resources.DecodeIngressRoutes)),
		certs: store.NewCache(st, resources.IngressCertificatesPrefix(), func(kv store.KV) (api.IngressCertificate, bool) {
			c, err := resources.DecodeIngressCertificate(kv)
			return c, err == nil
		}),
		jobs:       store.NewCache(st, resources.JobsPrefix(), decodeJobEntry),
		secrets:    store.NewCache(st, resources.SecretsPrefix(""), decodeSecretInfo),
		secretRefs: store.NewCache(st, resources.SecretRefsPrefix(), keepEveryKey(resources.DecodeSecretRef)),
		jobIdx:     jobIndex{keys: map[string]map[string]struct{}{}},
		idx:        newViewIndex(),
	}
	if v.desired == nil {
		v.desired, v.ownDesired = resources.NewDesiredIndex(st), true
	}
	v.desired.Subscribe(func(k string) { v.markDirty(factDesired, k) })
	v.assigns.SetIndex(v.assignmentChanged)
	v.nodes.SetIndex(v.nodeChanged)
	v.apps.SetIndex(func(key string, _, _ *api.AppSource) {
		v.markDirty(factAppSources, strings.TrimPrefix(key, resources.AppSourcesPrefix()))
	})
	v.regs.SetIndex(func(string, *api.NodeRegistration, *api.NodeRegistration) {
		v.markAll(factNodes)
		reconcile.Poke(v.beatWake)
	})
	v.beats.SetIndex(v.heartbeatChanged)
	v.builds.SetIndex(v.buildChanged)
	v.sources.SetIndex(v.sourceChanged)
	v.jobs.SetIndex(v.jobChanged)
	v.rollouts.SetIndex(func(key string, old, new *api.Rollout) {
		// The status reads a rollout's failure only.
		var was, is *api.RolloutFailure
		if old != nil {
			was = old.Failure
		}
		if new != nil {
			is = new.Failure
		}
		if !failureEqual(was, is) {
			v.markDirty(factRollouts, strings.TrimPrefix(key, resources.RolloutsPrefix()))
		}
	})
	v.subnets.SetIndex(func(string, *netip.Prefix, *netip.Prefix) { v.markAll(factNodes) })
	v.ipam.SetIndex(v.ipamChanged)
	// A secret's change is rare: every workload is planned again.
	v.secrets.SetIndex(func(string, *api.SecretInfo, *api.SecretInfo) { v.markAll(factDesired) })
	v.ingress.SetIndex(func(key string, _, _ *api.IngressRoutes) {
		if ns, name, ok := resources.ParseIngressRoutesKey(key); ok {
			v.markDirty(factIngress, ns+"/"+name)
		}
	})
	v.certs.SetIndex(func(string, *api.IngressCertificate, *api.IngressCertificate) { v.markAll(factCertificates) })
	return v
}

// decodeSecretInfo keeps what may be shown of a secret record: the sealed
// values are dropped.
func decodeSecretInfo(kv store.KV) (api.SecretInfo, bool) {
	s, ok := decodeJSON[api.Secret](kv)
	return s.SecretInfo, ok
}

// secret returns what is known of a secret.
func (v *view) secret(ns, name string) (api.SecretInfo, bool) {
	return v.secrets.Get(resources.SecretKey(ns, name))
}

// decodeSubnet decodes the subnet key of a node's overlay record; the
// record's other keys are skipped.
func decodeSubnet(kv store.KV) (netip.Prefix, bool) {
	nets, err := resources.DecodeNodeNetworks([]store.KV{kv})
	if err != nil || len(nets) != 1 || !nets[0].Subnet.IsValid() || kv.Key != resources.NodeSubnetKey(nets[0].Node) {
		return netip.Prefix{}, false
	}
	return nets[0].Subnet, true
}

func decodeJSON[T any](kv store.KV) (T, bool) {
	var v T
	return v, json.Unmarshal(kv.Value, &v) == nil
}

func decodeRollout(kv store.KV) (api.Rollout, bool) {
	r, ok := decodeJSON[api.Rollout](kv)
	resources.InternRollout(&r)
	return r, ok
}

func decodeSourceStatus(kv store.KV) (api.SourceStatus, bool) {
	if !strings.HasSuffix(kv.Key, "/status") {
		return api.SourceStatus{}, false
	}
	return decodeJSON[api.SourceStatus](kv)
}

func decodeStatus(kv store.KV) (storedStatus, bool) {
	st, ok := decodeJSON[api.WorkloadStatus](kv)
	resources.InternStatus(&st)
	return storedStatus{status: st, version: kv.Version}, ok
}

// run keeps every cache current until ctx ends.
func (v *view) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if v.ownDesired {
		g.Go(func() error { return v.desired.Run(ctx) })
	}
	g.Go(func() error { return v.assigns.Run(ctx, nil) })
	g.Go(func() error { return v.nodes.Run(ctx, nil) })
	g.Go(func() error { return v.apps.Run(ctx, nil) })
	g.Go(func() error { return v.builds.Run(ctx, nil) })
	g.Go(func() error { return v.sources.Run(ctx, nil) })
	g.Go(func() error { return v.statuses.Run(ctx, nil) })
	g.Go(func() error { return v.regs.Run(ctx, nil) })
	g.Go(func() error { return v.beats.Run(ctx, nil) })
	g.Go(func() error { return v.jobs.Run(ctx, nil) })
	g.Go(func() error { return v.rollouts.Run(ctx, nil) })
	g.Go(func() error { return v.subnets.Run(ctx, nil) })
	g.Go(func() error { return v.ipam.Run(ctx, nil) })
	g.Go(func() error { return v.daemonRollouts.Run(ctx, nil) })
	g.Go(func() error { return v.secrets.Run(ctx, nil) })
	g.Go(func() error { return v.ingress.Run(ctx, nil) })
	g.Go(func() error { return v.secretRefs.Run(ctx, nil) })
	g.Go(func() error { return v.certs.Run(ctx, nil) })
	return g.Wait()
}

// waitSynced returns once every cache holds its first listing and the
// records a former leader left in them are taken (seedPlacementFailures),
// or ctx ended.
func (v *view) waitSynced(ctx context.Context) error {
	if err := v.waitListed(ctx); err != nil {
		return err
	}
	v.seeded.Do(v.seedPlacementFailures)
	return nil
}

// waitListed returns once every cache holds its first listing, or ctx
// ended.
func (v *view) waitListed(ctx context.Context) error {
	for _, ch := range []<-chan struct{}{v.desired.Synced(), v.assigns.Synced(), v.nodes.Synced(), v.apps.Synced(),
		v.builds.Synced(), v.sources.Synced(), v.statuses.Synced(), v.regs.Synced(), v.beats.Synced(), v.rollouts.Synced(),
		v.subnets.Synced(), v.ipam.Synced(), v.daemonRollouts.Synced(), v.jobs.Synced(), v.secrets.Synced(),
		v.ingress.Synced(), v.secretRefs.Synced(), v.certs.Synced()} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// workload is one workload's desired state with its parsed spec.
type workload struct {
	Meta        api.WorkloadMeta
	MetaVersion int64
	Files       map[string][]byte
	// Spec is nil while the files do not parse to the meta's spec hash.
	Spec *spec
}

// Key is "ns/name".
func (w workload) Key() string { return w.Meta.Namespace + "/" + w.Meta.Name }

// workload returns the desired state of workload key with its spec from the
// cache (parsed only on a new spec hash).
func (v *view) workload(key string) (workload, bool) {
	ns, name := resources.SplitKey(key)
	d, ok := v.desired.Workload(ns, name)
	if !ok {
		return workload{}, false
	}
	return workload{Meta: d.Meta, MetaVersion: d.Version, Files: d.Files, Spec: v.specs.get(d.Meta, d.Files)}, true
}

// workloadsOf returns the desired state of those of keys that exist.
func (v *view) workloadsOf(keys []string) []workload {
	out := make([]workload, 0, len(keys))
	for _, k := range keys {
		if w, ok := v.workload(k); ok {
			out = append(out, w)
		}
	}
	return out
}

// appSource returns the app-source record of workload key.
func (v *view) appSource(key string) (api.AppSource, bool) {
	return v.apps.Get(resources.AppSourcesPrefix() + key)
}

// storedStatus returns workload key's status as stored.
func (v *view) storedStatus(key string) storedStatus {
	st, _ := v.statuses.Get(resources.StatusPrefix() + key)
	return st
}

// daemonRollout returns the node-by-node update record of workload key.
func (v *view) daemonRollout(key string) (*api.DaemonRolloutRecord, bool) {
	ns, name := resources.SplitKey(key)
	r, ok := v.daemonRollouts.Get(resources.DaemonRolloutKey(ns, name))
	if !ok {
		return nil, false
	}
	return &r, true
}

// rolloutOf returns workload key's rollout record as stored.
func (v *view) rolloutOf(key string) (api.Rollout, bool) {
	return v.rollouts.Get(resources.RolloutsPrefix() + key)
}

// setWakes records, for the workloads keys placement planned, when each
// wants its next pass (found; none for those absent), and pokes the clock.
func (v *view) setWakes(keys []string, found map[string]time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range keys {
		delete(v.wakes, k)
	}
	maps.Copy(v.wakes, found)
	reconcile.Poke(v.wakesChanged)
}

// dueWakes removes and returns the workloads whose wake time is at or before
// now, and returns the earliest time still to come (zero: none).
func (v *view) dueWakes(now time.Time) (due []string, next time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, t := range v.wakes {
		if !t.After(now) {
			due = append(due, k)
			delete(v.wakes, k)
		} else if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	slices.Sort(due)
	return due, next
}

// setScheduling records what placement found for the workloads it planned,
// forgets it for those of keys that are gone, and marks dirty, for the
// status loop, those whose finding changed.
func (v *view) setScheduling(keys []string, found map[string]Scheduling) {
	var gone []string
	for _, k := range keys {
		if _, ok := v.desired.Workload(resources.SplitKey(k)); !ok {
			gone = append(gone, k)
		}
	}
	var changed []string
	v.mu.Lock()
	for _, k := range gone {
		delete(v.scheduling, k)
	}
	for k, s := range found {
		if old, ok := v.scheduling[k]; !ok || old != s {
			v.scheduling[k] = s
			changed = append(changed, k)
		}
	}
	v.mu.Unlock()
	v.markDirty(factScheduling, changed...)
}

// schedulingOf returns placement's last finding for workload key.
func (v *view) schedulingOf(key string) (Scheduling, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s, ok := v.scheduling[key]
	return s, ok
}

// keepEveryKey makes decode a cache's decoder for a prefix one loop alone
// writes: every key is kept, one that does not decode as the zero record
// (naming nothing), so that the loop sees it and deletes it.
func keepEveryKey[T any](decode func(store.KV) (T, error)) func(store.KV) (T, bool) {
	return func(kv store.KV) (T, bool) {
		v, err := decode(kv)
		if err != nil {
			var zero T
			return zero, true
		}
		return v, true
	}
}
