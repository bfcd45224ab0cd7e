package leader

import (
	"context"
	"fmt"
	"slices"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// collectRescan bounds the collector's sleep: a node that turns NotReady
// changes no key it watches, so it looks again at least this often.
const collectRescan = 30 * time.Second

// Reasons of the leader's events about nodes.
const (
	EventNodeCollected = "NodeCollected"
	EventNodeReady     = "NodeReady"
	EventNodeNotReady  = "NodeNotReady"
)

// notReadySince returns since when node n is NotReady at now (zero while it
// is Ready): its departure, or the end of its last heartbeat's lossTimeout,
// whichever came first; a node that never beat counts from its joining, and
// no earlier than termStart (a new leader gives every node a whole period).
func notReadySince(n resources.Node, now, termStart time.Time, lossTimeout time.Duration) time.Time {
	if n.Ready(now, lossTimeout) {
		return time.Time{}
	}
	var since time.Time
	if n.Heartbeat.IsZero() {
		since = maxTime(n.Registration.JoinedAt, termStart)
	} else {
		since = n.Heartbeat.Add(lossTimeout)
	}
	if d := n.Registration.DepartedAt; n.Departed() && d.Before(since) {
		since = *d
	}
	return since
}

// collectable returns, sorted, the nodes NotReady for at least after at now,
// and the earliest time another one would be, as far as it can tell (zero:
// none). It is pure.
func collectable(nodes []resources.Node, now, termStart time.Time, lossTimeout, after time.Duration) ([]string, time.Time) {
	var out []string
	var next time.Time
	for _, n := range nodes {
		since := notReadySince(n, now, termStart, lossTimeout)
		if since.IsZero() {
			since = n.Heartbeat.Add(lossTimeout) // the soonest it can turn NotReady
		}
		due := since.Add(after)
		if !now.Before(due) {
			out = append(out, n.Registration.Name)
			continue
		}
		if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	slices.Sort(out)
	return out, next
}

// collect deletes the nodes NotReady for longer than cfg.CollectAfter at
// now with everything they held (cfg.CollectNode), each with a
// NodeCollected event, and returns when the next one may be due (zero:
// never). It does nothing when CollectAfter or CollectNode is unset. The
// node-loss clock runs it.
func (l *Leader) collect(ctx context.Context, now time.Time) time.Time {
	if l.cfg.CollectAfter <= 0 || l.cfg.CollectNode == nil {
		return time.Time{}
	}
	log := l.cfg.Logger.With().Str("component", "collect").Logger()
	names, next := collectable(l.view.allNodes(), now, l.view.termStart, l.cfg.NodeLossTimeout, l.cfg.CollectAfter)
	for _, name := range names {
		if err := l.cfg.CollectNode(ctx, name); err != nil {
			if ctx.Err() == nil {
				log.Warn().Err(err).Str("node", name).Msg("cannot collect a node NotReady for long")
			}
			continue
		}
		log.Warn().Str("node", name).Dur("after", l.cfg.CollectAfter).Msg("collected a node NotReady for long")
		ev := api.Event{Time: now.UTC(), Type: api.EventWarning, Object: "node/" + name, Reason: EventNodeCollected,
			Message: fmt.Sprintf("node %s was NotReady for more than %s: deleted with its instances, subnet, overlay peer and etcd user; to bring it back, join it again from an empty data directory",
				name, l.cfg.CollectAfter)}
		if err := l.cfg.Repo.AppendEvent(ctx, ev); err != nil {
			log.Warn().Err(err).Str("node", name).Msg("cannot record the collection's event")
		}
	}
	if len(names) > 0 || next.IsZero() {
		// A failed deletion is tried again; a node that turns NotReady
		// changes no key: look again now and then.
		if rescan := now.Add(collectRescan); next.IsZero() || rescan.Before(next) {
			next = rescan
		}
	}
	return next
}
