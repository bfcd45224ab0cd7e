package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// PlacementFailure is a workload's record of the placement passes over it
// that failed in a row: how many, when the last one ran, when the next runs
// at the latest (ReplacePolicy.delay of the attempts after the last), and
// the last one's error. A pass that succeeds drops it. The workload's
// status shows it (DeriveWorkloadStatus), and a new leader takes it from
// there (seedPlacementFailures): a change of leader neither resets the
// attempts nor forgets the next try.
type PlacementFailure struct {
	Attempts       int
	LastAt, NextAt time.Time
	Reason         string
}

// errBackedOff marks the error of a placement pass whose workloads were
// given their next try (placementTried): the loop does not put them back
// for the next wake-up.
var errBackedOff = errors.New("retried after a back-off")

// stepPlacementFailure returns a workload's record after a placement pass
// over it that ended with err at now, from its record before (nil: none).
// It is pure.
func stepPlacementFailure(prev *PlacementFailure, err error, now time.Time, pol ReplacePolicy) *PlacementFailure {
	if err == nil {
		return nil
	}
	attempts := 1
	if prev != nil {
		attempts = prev.Attempts + 1
	}
	return &PlacementFailure{Attempts: attempts, LastAt: now, NextAt: now.Add(pol.delay(attempts)), Reason: err.Error()}
}

// placementFailedPrefix starts a workload's RetryReason while placement
// passes over it fail.
const placementFailedPrefix = "placement failed: "

// placementFailureIn returns the record of failed placement passes a
// workload's status shows (Reconciling=True PlacementFailed), if it shows
// one. It is pure.
func placementFailureIn(st api.WorkloadStatus) (PlacementFailure, bool) {
	c := condition(st, ConditionReconciling)
	if c == nil || c.Reason != ReasonPlacementFailed || st.NextRetryTime == nil || st.Attempts < 1 ||
		!strings.HasPrefix(st.RetryReason, placementFailedPrefix) {
		return PlacementFailure{}, false
	}
	pf := PlacementFailure{Attempts: st.Attempts, NextAt: *st.NextRetryTime, Reason: strings.TrimPrefix(st.RetryReason, placementFailedPrefix)}
	if st.LastReconcileTime != nil {
		pf.LastAt = *st.LastReconcileTime
	}
	return pf, true
}

// seedPlacementFailures takes the records of failed placement passes the
// desired workloads' stored statuses show, written under a former leader,
// with a pass asked for at each next try: a new term goes on counting
// from them. Called once the view has synced, before any pass.
func (v *view) seedPlacementFailures() {
	stored, _ := v.statuses.Snapshot()
	v.mu.Lock()
	defer v.mu.Unlock()
	for key, st := range stored {
		k := strings.TrimPrefix(key, resources.StatusPrefix())
		pf, ok := placementFailureIn(st.status)
		if _, had := v.placeFailures[k]; !ok || had || !hasWorkload(v.desired, k) {
			continue
		}
		v.placeFailures[k] = pf
		if w, ok := v.wakes[k]; !ok || pf.NextAt.Before(w) {
			v.wakes[k] = pf.NextAt
		}
	}
}

// placeTracked is placeOnce, with the outcome recorded per workload
// (placementTried): a failed pass's workloads are tried again at their next
// try, or sooner when their facts change. A failed pass over every workload
// (keys nil, which also covers workloads gone with assignments left) is
// tried again at the next wake-up too.
func (l *Leader) placeTracked(ctx context.Context, keys []string) error {
	err := l.placeOnce(ctx, keys)
	if ctx.Err() != nil {
		return err
	}
	l.view.placementTried(keys, err, l.cfg.Now().UTC(), l.cfg.Replace)
	if err != nil && keys != nil {
		return fmt.Errorf("%w (%w)", err, errBackedOff)
	}
	return err
}

// placementTried records the outcome of a placement pass over the
// workloads keys (nil: every workload): a failure counts one more attempt
// and asks for a pass at the next try; a success drops the record. The
// status loop is told of every change.
func (v *view) placementTried(keys []string, err error, now time.Time, pol ReplacePolicy) {
	if keys == nil {
		keys = v.desired.Keys()
	}
	var desired map[string]bool // a record only for a workload that exists
	if err != nil {
		desired = make(map[string]bool, len(keys))
		for _, k := range keys {
			desired[k] = hasWorkload(v.desired, k)
		}
	}
	var changed []string
	v.mu.Lock()
	for _, k := range keys {
		prev, had := v.placeFailures[k]
		var p *PlacementFailure
		if had {
			p = &prev
		}
		next := stepPlacementFailure(p, err, now, pol)
		switch {
		case next == nil:
			if had {
				delete(v.placeFailures, k)
				changed = append(changed, k)
			}
		case desired[k]:
			v.placeFailures[k] = *next
			changed = append(changed, k)
			if w, ok := v.wakes[k]; !ok || next.NextAt.Before(w) {
				v.wakes[k] = next.NextAt
			}
		}
	}
	v.mu.Unlock()
	if err != nil {
		reconcile.Poke(v.wakesChanged)
	}
	v.markDirty(factScheduling, changed...)
}

// placementFailureOf returns workload key's record of failed placement
// passes, if any.
func (v *view) placementFailureOf(key string) (PlacementFailure, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	pf, ok := v.placeFailures[key]
	return pf, ok
}

// hasWorkload reports whether the workload key is desired.
func hasWorkload(d *resources.DesiredIndex, key string) bool {
	_, ok := d.Workload(resources.SplitKey(key))
	return ok
}
