package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultElectionPrefix is the etcd prefix of the leader election
// (docs/architecture.md "etcd keys").
const DefaultElectionPrefix = "/kat/leader_election"

// Etcd implements StateStore over a clientv3.Client. It is safe for
// concurrent use. Create it with New or Dial and release it with Close.
type Etcd struct {
	cli            *clientv3.Client
	ownsClient     bool
	electionPrefix string

	// ctx is cancelled by Close; every goroutine the store starts watches it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	cur    *campaign // current campaign or leadership, nil when none

	closeOnce sync.Once
	closeErr  error
}

var _ StateStore = (*Etcd)(nil)

// Option configures an Etcd created by New.
type Option func(*Etcd)

// WithOwnedClient makes Close also close the client passed to New. By default
// the caller keeps ownership of the client.
func WithOwnedClient() Option {
	return func(s *Etcd) { s.ownsClient = true }
}

// WithElectionPrefix sets the etcd prefix used by Campaign, Resign and
// GetLeader. The default is DefaultElectionPrefix. Every participant of one
// election must use the same prefix.
func WithElectionPrefix(prefix string) Option {
	return func(s *Etcd) { s.electionPrefix = strings.TrimSuffix(prefix, "/") }
}

// New returns a store that uses cli. It does not own cli (Close leaves it
// open) unless WithOwnedClient is given.
func New(cli *clientv3.Client, opts ...Option) *Etcd {
	s := &Etcd{cli: cli, electionPrefix: DefaultElectionPrefix}
	for _, o := range opts {
		o(s)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Client returns the underlying etcd client, for what the store does not
// wrap (maintenance, membership, leases).
func (s *Etcd) Client() *clientv3.Client { return s.cli }

// Close stops every watch and releases leadership (resigning and revoking
// the election lease), waits for the store's goroutines to end, then closes
// the client if the store owns it. Calling Close more than once is safe; later
// calls return the first result.
func (s *Etcd) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		s.wg.Wait()
		if s.ownsClient {
			if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
				s.closeErr = fmt.Errorf("close etcd client: %w", err)
			}
		}
	})
	return s.closeErr
}

// checkOpen returns ErrClosed once Close was called.
func (s *Etcd) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// goStart registers one store-owned goroutine. It fails once the store is
// closed, so Close never races with a new goroutine.
func (s *Etcd) goStart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.wg.Add(1)
	return nil
}

// Put writes value at key.
func (s *Etcd) Put(ctx context.Context, key string, value []byte) error {
	if err := s.checkKey(key); err != nil {
		return fmt.Errorf("put key %q: %w", key, err)
	}
	if _, err := s.cli.Put(ctx, key, string(value)); err != nil {
		return fmt.Errorf("put key %q: %w", key, err)
	}
	return nil
}

// Get reads key. It returns an error wrapping ErrNotFound when the key does
// not exist.
func (s *Etcd) Get(ctx context.Context, key string) (*KV, error) {
	if err := s.checkKey(key); err != nil {
		return nil, fmt.Errorf("get key %q: %w", key, err)
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get key %q: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("get key %q: %w", key, ErrNotFound)
	}
	kv := fromPB(resp.Kvs[0])
	return &kv, nil
}

// Delete deletes key. Deleting a missing key is not an error.
func (s *Etcd) Delete(ctx context.Context, key string) error {
	if err := s.checkKey(key); err != nil {
		return fmt.Errorf("delete key %q: %w", key, err)
	}
	if _, err := s.cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete key %q: %w", key, err)
	}
	return nil
}

// List returns every key that starts with prefix, sorted by key. An empty
// prefix lists the whole store.
func (s *Etcd) List(ctx context.Context, prefix string) ([]KV, error) {
	kvs, _, err := s.ListWithRevision(ctx, prefix)
	return kvs, err
}

// ListWithRevision is List that also returns the store revision the listing
// reflects. Watching from that revision + 1 misses no change after the list:
//
//	kvs, rev, err := s.ListWithRevision(ctx, "/kat/nodes/")
//	events, err := s.Watch(ctx, "/kat/nodes/", rev+1)
func (s *Etcd) ListWithRevision(ctx context.Context, prefix string) ([]KV, int64, error) {
	kvs := []KV{}
	rev, err := s.Scan(ctx, prefix, func(kv KV) error {
		kvs = append(kvs, kv)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return kvs, rev, nil
}

// scanPage is how many keys one read of a Scan returns at most: a listing
// of thousands of workloads' manifests arrives in pieces of bounded size
// instead of one response that holds them all at once.
const scanPage = 500

// Scan calls fn for every key that starts with prefix, sorted by key, all
// read at one store revision, which it returns. The keys are read scanPage
// at a time, so a caller that keeps only what it needs holds no more than a
// page. An error from fn stops the scan and is returned.
func (s *Etcd) Scan(ctx context.Context, prefix string, fn func(KV) error) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, fmt.Errorf("list prefix %q: %w", prefix, err)
	}
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	if prefix == "" {
		key, end = "\x00", "\x00" // the whole store: every key from the first
	}
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(scanPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev)) // the later pages at the first one's revision
		}
		resp, err := s.cli.Get(ctx, key, opts...)
		if err != nil {
			return 0, fmt.Errorf("list prefix %q: %w", prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(fromPB(kv)); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00" // the next key after the page's last
	}
}

// Count returns how many keys start with prefix, reading no value.
func (s *Etcd) Count(ctx context.Context, prefix string) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, fmt.Errorf("count prefix %q: %w", prefix, err)
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count prefix %q: %w", prefix, err)
	}
	return resp.Count, nil
}

// FirstKeys returns the first n keys (sorted) that start with prefix,
// without their values.
func (s *Etcd) FirstKeys(ctx context.Context, prefix string, n int) ([]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, fmt.Errorf("list keys of prefix %q: %w", prefix, err)
	}
	if n <= 0 {
		return nil, nil
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(n)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("list keys of prefix %q: %w", prefix, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys, nil
}

// Revision returns the current store revision.
func (s *Etcd) Revision(ctx context.Context) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, fmt.Errorf("read store revision: %w", err)
	}
	resp, err := s.cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("read store revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Compact discards the history before rev and waits until the compaction is
// applied to the backend. Reads and watches at older revisions then fail or,
// for Watch, resynchronise (see Etcd.Watch).
func (s *Etcd) Compact(ctx context.Context, rev int64) error {
	if err := s.checkOpen(); err != nil {
		return fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	if _, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return fmt.Errorf("compact to revision %d: %w", rev, err)
	}
	return nil
}

// checkKey refuses empty keys and a closed store.
func (s *Etcd) checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	return s.checkOpen()
}
