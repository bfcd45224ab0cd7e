package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/store"
)

// Loop is one of the leader's loops: it runs until ctx ends and returns nil
// then. An error ends the term of leadership (see Leadership).
type Loop struct {
	// Name identifies the loop in logs.
	Name string
	// Run runs the loop until ctx ends.
	Run func(ctx context.Context) error
}

// Term is what a node does while it leads: it prepares the term (records
// only a leader writes, servers it starts) and returns the loops to run until
// leadership ends.
type Term func(ctx context.Context) ([]Loop, error)

// Leadership campaigns for the cluster's leadership and runs the leader's
// loops while it holds it. The loops start when this node is elected and all
// of them stop when leadership is lost or given up; they keep no state that
// etcd does not hold, so when leadership is won again (here or on another
// node) they resume from etcd with nothing lost.
type Leadership struct {
	// Store holds the election. Required.
	Store store.StateStore
	// ID is this candidate's unique ID, its node name. Required.
	ID string
	// LeaseTTLSeconds is the election lease: a leader that dies is replaced
	// this long after. Default store.DefaultLeaseTTLSeconds.
	LeaseTTLSeconds int64
	// LeaseTTL, when set, is asked for the lease before each campaign
	// instead of LeaseTTLSeconds (it may change, as the etcd quorum
	// grows).
	LeaseTTL func(ctx context.Context) int64
	// Term prepares each term and returns its loops. Required.
	Term Term
	// RetryDelay is the pause before campaigning again after a failed
	// campaign or a term that ended in an error. Default 1s.
	RetryDelay time.Duration
	// OnChange, when set, is told whether this node leads, each time that
	// changes. It must not block.
	OnChange func(leading bool)
	Logger   zerolog.Logger
}

// Run campaigns and leads until ctx ends; then it resigns, so another
// candidate takes over at once, and returns nil. A term ends when the
// leadership is lost (lease expired, key deleted, etcd unreachable) or when
// one of its loops fails; Run then waits for every loop of the term to
// return, and campaigns again.
func (l *Leadership) Run(ctx context.Context) error {
	if l.Store == nil || l.ID == "" || l.Term == nil {
		return errors.New("leadership: store, ID and term are required")
	}
	delay := l.RetryDelay
	if delay <= 0 {
		delay = time.Second
	}
	for ctx.Err() == nil {
		ttl := l.LeaseTTLSeconds
		if l.LeaseTTL != nil {
			ttl = l.LeaseTTL(ctx)
		}
		lctx, err := l.Store.Campaign(ctx, l.ID, ttl)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			l.Logger.Warn().Err(err).Msg("campaign for leadership failed; retrying")
			sleep(ctx, delay)
			continue
		}
		l.Logger.Info().Str("node", l.ID).Msg("elected leader")
		l.changed(true)
		err = l.term(lctx)
		l.changed(false)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			l.Logger.Error().Err(err).Msg("leader term failed; resigning and campaigning again")
			l.resign()
			sleep(ctx, delay)
			continue
		}
		l.Logger.Warn().Err(context.Cause(lctx)).Msg("lost leadership; campaigning again")
	}
	l.resign()
	return nil
}

// term runs one term of leadership: every loop, until lctx ends or one of
// them fails. It returns once all of them have returned.
func (l *Leadership) term(lctx context.Context) error {
	loops, err := l.Term(lctx)
	if err != nil {
		if lctx.Err() != nil {
			return nil // the term was cut short by losing leadership
		}
		return fmt.Errorf("start leader term: %w", err)
	}
	g, gctx := errgroup.WithContext(lctx)
	for _, lp := range loops {
		g.Go(func() error {
			err := lp.Run(gctx)
			if err != nil && gctx.Err() == nil {
				return fmt.Errorf("leader loop %s: %w", lp.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func (l *Leadership) changed(leading bool) {
	metrics.LeaderChanged(leading)
	if l.OnChange != nil {
		l.OnChange(leading)
	}
}

// resign gives the leadership up (a no-op when this node does not hold it),
// bounded so that shutdown never hangs on an unreachable etcd.
func (l *Leadership) resign() {
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.Store.Resign(rctx); err != nil && !errors.Is(err, store.ErrNotLeader) && !errors.Is(err, store.ErrClosed) {
		l.Logger.Debug().Err(err).Msg("resign leadership")
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
