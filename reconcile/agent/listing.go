package agent

import (
	"context"
	"sync"
	"time"

	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
)

// listTimeout bounds one listing of the containers.
const listTimeout = time.Minute

// listContainers lists the node's containers and applies the listing,
// keeping what steps did since it started; a failed listing is retried on
// the next tick.
func (ag *Agent) listContainers(ctx context.Context) {
	seq := ag.table.startListing()
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	cs, err := ag.cfg.Runtime.ListManagedContainers(lctx, ag.labels())
	cancel()
	if ctx.Err() != nil {
		return
	}
	failing := ag.health.listFailing()
	repeated := ag.health.listed(err)
	if err == nil {
		ag.table.applyListing(seq, ag.ownedOnly(cs))
		if failing {
			ag.nodeRecovered("the container runtime lists containers again")
		}
	} else {
		if !repeated {
			ag.cfg.Logger.Warn().Err(err).Msg("cannot list containers; retrying every tick")
		}
		ag.retryList.Store(true)
	}
	ag.notifyIfChanged()
	reconcile.Poke(ag.wake)
}

// watchEvents turns runtime events into re-lists, restarting the stream when
// it fails.
func (ag *Agent) watchEvents(ctx context.Context) {
	events := make(chan runtime.Event, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-events:
				if ag.listsAfter(ev) {
					reconcile.Poke(ag.listNow)
				}
			}
		}
	}()
	for ctx.Err() == nil {
		err := ag.cfg.Runtime.Events(ctx, ag.labels(), events)
		if ctx.Err() != nil {
			return
		}
		ag.cfg.Logger.Debug().Err(err).Msg("container event stream ended; resync covers the gap, reopening")
		select {
		case <-ctx.Done():
		case <-time.After(ag.cfg.Resync):
		}
	}
}

// listsAfter reports whether an event asks for a listing of the containers:
// a container that ended or changed state without a step of this agent.
// What the agent's own steps do (a run's create, init and start; a removal's
// stop, death and removal) the step reports itself, and the rest (exec
// health checks' exec and exec_died, mounts, attaches) changes no state: a
// listing after each would compete with the steps for the runtime.
func (ag *Agent) listsAfter(ev runtime.Event) bool {
	switch ev.Action {
	case runtime.ActionDied, runtime.ActionStop, runtime.ActionKill, runtime.ActionRemove,
		runtime.ActionPause, runtime.ActionResume, runtime.ActionOOM, runtime.ActionRestart:
	default:
		return false
	}
	return !ag.table.removing(containerKey(ev.Labels, ev.ID))
}
