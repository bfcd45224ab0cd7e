package store

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaseID identifies an etcd lease. Keys written with a lease are deleted
// when it expires or is revoked. KAT uses one for the leader election
// only: node liveness is the heartbeat's time, and instance addresses are
// freed with their assignments.
type LeaseID int64

// Grant creates a lease that expires after ttlSeconds unless kept alive.
// etcd may raise a very small TTL to its minimum (about 2s by default).
func (s *Etcd) Grant(ctx context.Context, ttlSeconds int64) (LeaseID, error) {
	if err := s.checkOpen(); err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	resp, err := s.cli.Grant(ctx, ttlSeconds)
	if err != nil {
		return 0, fmt.Errorf("grant lease of %ds: %w", ttlSeconds, err)
	}
	return LeaseID(resp.ID), nil
}

// PutWithLease writes value at key, attached to lease: the key is deleted
// when the lease ends.
func (s *Etcd) PutWithLease(ctx context.Context, key string, value []byte, lease LeaseID) error {
	if err := s.checkKey(key); err != nil {
		return fmt.Errorf("put key %q with lease %x: %w", key, int64(lease), err)
	}
	if _, err := s.cli.Put(ctx, key, string(value), clientv3.WithLease(clientv3.LeaseID(lease))); err != nil {
		return fmt.Errorf("put key %q with lease %x: %w", key, int64(lease), err)
	}
	return nil
}

// KeepAlive refreshes lease until ctx ends, then returns nil (the lease then
// expires after its TTL unless revoked). It returns an error wrapping
// ErrLeaseLost as soon as the lease has expired or was revoked, or the client
// was closed. Run it in a goroutine the caller owns.
func (s *Etcd) KeepAlive(ctx context.Context, lease LeaseID) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("keep lease %x alive: %w", int64(lease), err)
	}
	ch, err := s.cli.KeepAlive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return fmt.Errorf("keep lease %x alive: %w", int64(lease), err)
	}
	for range ch {
		// Drain the responses; the channel closes when the lease ends.
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("keep lease %x alive: %w", int64(lease), ErrLeaseLost)
}

// Revoke ends lease at once, deleting the keys attached to it.
func (s *Etcd) Revoke(ctx context.Context, lease LeaseID) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("revoke lease %x: %w", int64(lease), err)
	}
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		return fmt.Errorf("revoke lease %x: %w", int64(lease), err)
	}
	return nil
}
