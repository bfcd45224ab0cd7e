package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultLeaseTTLSeconds is the election lease TTL Campaign uses when
// leaseTTLSeconds is zero or negative.
const DefaultLeaseTTLSeconds = 5

// campaign is one Campaign call and, once elected, the leadership it won.
type campaign struct {
	// done is closed once the campaign failed or the leadership was released.
	done chan struct{}

	// Set under Etcd.mu when elected.
	lctx   context.Context
	cancel context.CancelCauseFunc
	key    string
	rev    int64

	// releaseErr is written before done is closed.
	releaseErr error
}

// Campaign blocks until this store is the leader of the election under the
// election prefix (DefaultElectionPrefix unless WithElectionPrefix), with
// leaderID as its value, or until ctx ends. It uses an etcd session whose
// lease has leaseTTLSeconds (DefaultLeaseTTLSeconds when <= 0): a leader that
// stops refreshing it, by crashing or losing etcd, loses leadership after
// that long.
//
// The returned leadership context is cancelled, with a context.Cause, when:
// the election lease expires or the leader key is deleted (ErrLeadershipLost),
// Resign is called (ErrResigned), the store is closed (ErrClosed), or ctx
// ends (ctx's cause). Pass a ctx that lives as long as the leader should, not
// one bounded to the wait. Whatever ends it, leadership is then released (the
// leader key is deleted and the lease revoked) so another candidate takes over
// at once.
//
// A candidacy key that already holds leaderID under another lease is taken to
// be left by an earlier run of this same candidate that died without
// resigning (a crash, kill -9): its lease is revoked, so a restarted leader
// takes over at once instead of waiting out the old lease. Candidate IDs must
// therefore be unique, as node names are.
//
// Only one campaign at a time runs per store: Campaign returns
// ErrAlreadyCampaigning while another is waiting or leads. Once a leadership
// context is done, Campaign may be called again; it waits for the previous
// leadership to be released first.
func (s *Etcd) Campaign(ctx context.Context, leaderID string, leaseTTLSeconds int64) (context.Context, error) {
	if leaseTTLSeconds <= 0 {
		leaseTTLSeconds = DefaultLeaseTTLSeconds
	}
	c := &campaign{done: make(chan struct{})}
	if err := s.register(ctx, c); err != nil {
		return nil, fmt.Errorf("campaign for leadership as %q: %w", leaderID, err)
	}
	lctx, err := s.campaign(ctx, c, leaderID, leaseTTLSeconds)
	if err != nil {
		s.unregister(c)
		return nil, fmt.Errorf("campaign for leadership as %q: %w", leaderID, err)
	}
	return lctx, nil
}

// register makes c the store's campaign.
func (s *Etcd) register(ctx context.Context, c *campaign) error {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		prev := s.cur
		if prev == nil {
			s.cur = c
			s.mu.Unlock()
			return nil
		}
		ending := prev.lctx != nil && prev.lctx.Err() != nil
		s.mu.Unlock()
		if !ending {
			return ErrAlreadyCampaigning
		}
		select {
		case <-prev.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// unregister ends c.
func (s *Etcd) unregister(c *campaign) {
	s.mu.Lock()
	if s.cur == c {
		s.cur = nil
	}
	s.mu.Unlock()
	close(c.done)
}

// campaign runs the election and, once elected, starts holding leadership.
func (s *Etcd) campaign(ctx context.Context, c *campaign, leaderID string, ttl int64) (context.Context, error) {
	lease, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant election lease: %w", err)
	}
	session, err := concurrency.NewSession(s.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(ttl)))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Duration(ttl)*time.Second)
		_, _ = s.cli.Revoke(rctx, lease.ID)
		cancel()
		return nil, fmt.Errorf("start election session: %w", err)
	}
	if err := s.reclaimStale(ctx, leaderID, lease.ID); err != nil {
		_ = session.Close()
		return nil, err
	}
	el := concurrency.NewElection(session, s.electionPrefix)

	cctx, ccancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(s.ctx, ccancel)
	stopOnLoss := context.AfterFunc(session.Ctx(), ccancel)
	err = el.Campaign(cctx, leaderID)
	stopOnClose()
	stopOnLoss()
	ccancel()
	if err == nil && session.Ctx().Err() != nil {
		err = errLeaseLost
	}
	if err != nil {
		_ = session.Close()
		switch {
		case s.ctx.Err() != nil:
			return nil, ErrClosed
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		case session.Ctx().Err() != nil:
			return nil, errLeaseLost
		}
		return nil, err
	}

	lctx, lcancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	closed := s.closed
	if !closed {
		c.lctx, c.cancel, c.key, c.rev = lctx, lcancel, el.Key(), el.Rev()
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closed {
		lcancel(ErrClosed)
		_ = s.release(el, session, ttl)
		return nil, ErrClosed
	}
	stop := context.AfterFunc(s.ctx, func() { lcancel(ErrClosed) })
	go func() {
		defer s.wg.Done()
		defer stop()
		if cause := s.holdLeadership(lctx, session, c.key, c.rev); cause != nil {
			lcancel(cause)
		}
		if errors.Is(context.Cause(lctx), errLeaseLost) {
			// The lease is gone, and the key with it: nothing to release,
			// and etcd may be unreachable anyway.
			session.Orphan()
		} else if err := s.release(el, session, ttl); !errors.Is(context.Cause(lctx), ErrLeadershipLost) {
			c.releaseErr = err
		}
		s.unregister(c)
	}()
	return lctx, nil
}

var (
	errLeaseLost = fmt.Errorf("%w: election lease expired or was revoked", ErrLeadershipLost)
	errKeyLost   = fmt.Errorf("%w: leader key was deleted", ErrLeadershipLost)
)

// holdLeadership returns when leadership is lost (with the reason) or when
// lctx ends (nil). It watches both the session and the leader key. Every etcd
// call it makes ends with the session too: a leader cut off from etcd must
// step down when its lease runs out, not wait for etcd to answer.
func (s *Etcd) holdLeadership(lctx context.Context, session *concurrency.Session, key string, rev int64) error {
	ctx, cancel := context.WithCancel(lctx)
	defer cancel()
	stop := context.AfterFunc(session.Ctx(), cancel)
	defer stop()
	cause := func() error {
		if lctx.Err() != nil {
			return nil
		}
		return errLeaseLost
	}
	next := rev + 1
	delay := minRetryDelay
	for {
		deleted := s.watchLeaderKey(ctx, key, &next)
		if deleted {
			return errKeyLost
		}
		if ctx.Err() != nil {
			return cause()
		}
		// The watch ended on its own: check the key is still ours.
		resp, err := s.cli.Get(ctx, key)
		if ctx.Err() != nil {
			return cause()
		}
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
				return errKeyLost
			}
			next = resp.Header.Revision + 1
			delay = minRetryDelay
		}
		if !sleepCtx(ctx, jitter(delay)) {
			return cause()
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// watchLeaderKey watches the leader key from *next until ctx ends, the etcd
// watch ends on its own, or the key is deleted, which it reports.
func (s *Etcd) watchLeaderKey(ctx context.Context, key string, next *int64) bool {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(wctx, key, clientv3.WithRev(*next))
	for {
		select {
		case <-ctx.Done():
			return false
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return false
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return true
				}
				*next = ev.Kv.ModRevision + 1
			}
		}
	}
}

// release deletes the leader key and revokes the lease, each bounded by the
// lease TTL (after which the lease would be gone anyway).
func (s *Etcd) release(el *concurrency.Election, session *concurrency.Session, ttl int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(ttl)*time.Second)
	defer cancel()
	var errs []error
	if err := el.Resign(ctx); err != nil {
		errs = append(errs, fmt.Errorf("delete leader key: %w", err))
	}
	if err := session.Close(); err != nil {
		errs = append(errs, fmt.Errorf("revoke election lease: %w", err))
	}
	return errors.Join(errs...)
}

// Resign gives up the leadership won by Campaign: it cancels the leadership
// context with cause ErrResigned and waits, bounded by ctx, until the leader
// key is deleted and the lease revoked. It returns an error wrapping
// ErrNotLeader when this store does not hold leadership; when its leadership
// has just ended, it first waits, bounded by ctx, for that release.
func (s *Etcd) Resign(ctx context.Context) error {
	s.mu.Lock()
	c := s.cur
	var lctx context.Context
	var cancel context.CancelCauseFunc
	if c != nil {
		lctx, cancel = c.lctx, c.cancel
	}
	s.mu.Unlock()
	if lctx == nil {
		return fmt.Errorf("resign leadership: %w", ErrNotLeader)
	}
	if lctx.Err() != nil {
		// Leadership already ended: wait until it is released, so that a
		// caller that resigns on its way out leaves no leader key behind.
		select {
		case <-c.done:
		case <-ctx.Done():
		}
		return fmt.Errorf("resign leadership: %w", ErrNotLeader)
	}
	cancel(ErrResigned)
	select {
	case <-c.done:
		if c.releaseErr != nil {
			return fmt.Errorf("resign leadership: %w", c.releaseErr)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("resign leadership: wait for release: %w", context.Cause(ctx))
	}
}

// GetLeader returns the value (leader ID) of the current leader, the
// candidate with the oldest key under the election prefix. It returns an
// error wrapping ErrNoLeader when there is none.
func (s *Etcd) GetLeader(ctx context.Context) (string, error) {
	if err := s.checkOpen(); err != nil {
		return "", fmt.Errorf("get leader: %w", err)
	}
	resp, err := s.cli.Get(ctx, s.electionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("get leader under %q: %w", s.electionPrefix, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("get leader under %q: %w", s.electionPrefix, ErrNoLeader)
	}
	return string(resp.Kvs[0].Value), nil
}

// LeadershipCompare returns a transaction check that holds only while the
// leader key this store won is unchanged, and whether this store currently
// leads. Adding it to DoTransaction's checks fences a leader's writes: a
// leader that lost its lease (and may not have noticed yet) cannot commit.
func (s *Etcd) LeadershipCompare() (Compare, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cur
	if c == nil || c.lctx == nil || c.lctx.Err() != nil {
		return Compare{}, false
	}
	return Compare{Key: c.key, ExpectedVersion: c.rev}, true
}

// reclaimStale revokes the leases of candidacy keys that hold leaderID but
// belong to a lease other than own: leftovers of an earlier run of this
// candidate.
func (s *Etcd) reclaimStale(ctx context.Context, leaderID string, own clientv3.LeaseID) error {
	resp, err := s.cli.Get(ctx, s.electionPrefix+"/", clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("read election candidates: %w", err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) != leaderID || clientv3.LeaseID(kv.Lease) == own || kv.Lease == 0 {
			continue
		}
		if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("revoke stale candidacy %s: %w", kv.Key, err)
		}
	}
	return nil
}
