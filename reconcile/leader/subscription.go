package leader

import (
	"slices"
	"time"

	"kat.dws.rip/kat/reconcile"
)

// factKind names one kind of fact the leader's loops read; a loop subscribes
// to the kinds it decides from and is told which workloads they changed for.
type factKind int

const (
	factDesired factKind = iota
	factAssignments
	// factInstances changes when a node reports a different set or state of
	// instances; a heartbeat that changes nothing else does not count.
	factInstances
	factAppSources
	factBuilds
	factSources
	// factNodes changes for every workload when a node registers, changes
	// its registration or allocatable resources, or turns Ready or
	// NotReady.
	factNodes
	// factScheduling changes when placement finds a workload's desired or
	// unplaced count or reason different.
	factScheduling
	// factJobs changes when a Job's run or schedule records change.
	factJobs
	// factRollouts changes when placement writes a workload's rollout
	// record with another failure.
	factRollouts
	// factTimers changes when a time placement asked to be woken at comes
	// (a drain delay or a progress deadline ends).
	factTimers
	// factIngress changes when a workload's ingress routes record does.
	factIngress
	// factCertificates changes for every workload when an ingress
	// certificate record does.
	factCertificates
	numFactKinds
)

// subscription is one loop's wake-up channel and the workloads ("ns/name")
// changed since its last take.
type subscription struct {
	kinds [numFactKinds]bool
	wake  chan struct{}
	// Guarded by view.mu.
	all   bool
	dirty map[string]struct{}
	// seen is when the first change since the last take was marked (for
	// kat_reconcile_latency_seconds); zero when none was.
	seen time.Time
}

// subscribe returns a subscription poked whenever a fact of one of kinds
// changes, with every workload dirty at first. Subscribe before run.
func (v *view) subscribe(kinds ...factKind) *subscription {
	s := &subscription{wake: make(chan struct{}, 1), all: true, dirty: map[string]struct{}{}}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.subs = append(v.subs, s)
	return s
}

// markDirty records that facts of kind changed for the workloads keys and
// wakes the loops that read them. It never blocks: the caches' hooks call it.
func (v *view) markDirty(kind factKind, keys ...string) {
	if len(keys) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.subs {
		if !s.kinds[kind] {
			continue
		}
		for _, k := range keys {
			s.dirty[k] = struct{}{}
		}
		s.markSeen(time.Now())
		reconcile.Poke(s.wake)
	}
}

// markSeen records t as when a change was first seen, unless an earlier
// one waits. Call it with view.mu held.
func (s *subscription) markSeen(t time.Time) {
	if s.seen.IsZero() || t.Before(s.seen) {
		s.seen = t
	}
}

// markAll records that facts of kind changed for every workload and wakes
// the loops that read them.
func (v *view) markAll(kind factKind) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range v.subs {
		if s.kinds[kind] {
			s.all = true
			s.markSeen(time.Now())
			reconcile.Poke(s.wake)
		}
	}
}

// take returns the workloads dirty since the last take, sorted, or all when
// every workload is, and when the first of their changes was seen; and
// forgets them.
func (v *view) take(s *subscription) (keys []string, all bool, seen time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	all, s.all = s.all, false
	seen, s.seen = s.seen, time.Time{}
	if !all {
		keys = make([]string, 0, len(s.dirty))
		for k := range s.dirty {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	if len(s.dirty) > bigDirty {
		// clear keeps a map's buckets: after a pass over thousands of
		// workloads, a new map lets them go.
		s.dirty = map[string]struct{}{}
	} else {
		clear(s.dirty)
	}
	return keys, all, seen
}

// bigDirty is the size of a dirty set that take replaces rather than clears.
const bigDirty = 256

// pending returns how many workloads are dirty, or all when every one is.
func (v *view) pending(s *subscription) (n int, all bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(s.dirty), s.all
}

// putBack marks keys (or every workload) dirty again, changed since seen,
// without waking the loop: a failed pass is retried on the next wake-up or
// resync.
func (v *view) putBack(s *subscription, keys []string, all bool, seen time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	s.all = s.all || all
	if all || len(keys) > 0 {
		s.markSeen(seen)
	}
	for _, k := range keys {
		s.dirty[k] = struct{}{}
	}
}
