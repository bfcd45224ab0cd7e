package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"kat.dws.rip/kat/store"
)

// DefaultArchiveKeep is how many generations of each workload the archive
// keeps.
const DefaultArchiveKeep = 10

// maxTxnAttempts bounds retries of a read-modify-write that lost a race.
const maxTxnAttempts = 16

// Repo reads and writes KAT's records in a StateStore. It is safe for
// concurrent use; concurrent writers are serialised by etcd transactions.
type Repo struct {
	st          store.StateStore
	archiveKeep int
	now         func() time.Time
	newUID      func() string
}

// Option configures a Repo.
type Option func(*Repo)

// WithArchiveKeep sets how many generations the archive keeps (default
// DefaultArchiveKeep, minimum 2 so that the previous version is always there).
func WithArchiveKeep(n int) Option {
	return func(r *Repo) { r.archiveKeep = max(n, 2) }
}

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(r *Repo) { r.now = now } }

// New returns a Repo over st.
func New(st store.StateStore, opts ...Option) *Repo {
	r := &Repo{st: st, archiveKeep: DefaultArchiveKeep, now: time.Now, newUID: uuid.NewString}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Store returns the underlying StateStore.
func (r *Repo) Store() store.StateStore { return r.st }

// getJSON reads key into v. It returns the key's version, or 0 and no error
// when the key does not exist.
func (r *Repo) getJSON(ctx context.Context, key string, v any) (int64, error) {
	kv, err := r.st.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(kv.Value, v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return kv.Version, nil
}

func putJSON(key string, v any) (store.Op, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return store.Op{}, fmt.Errorf("encode %s: %w", key, err)
	}
	return store.Op{Type: store.OpPut, Key: key, Value: b}, nil
}

// updateJSON reads key into a fresh T (its zero value when the key is
// absent: ver 0), lets change edit it, and writes it while the key is still
// at the version read, reading and changing again when another writer got
// there first. An error of change ends it with nothing written and is
// returned as it is; the others name the key.
func updateJSON[T any](ctx context.Context, r *Repo, key string, change func(v *T, ver int64) error) (*T, error) {
	for {
		var v T
		ver, err := r.getJSON(ctx, key, &v)
		if err != nil {
			return nil, fmt.Errorf("update %s: %w", key, err)
		}
		if err := change(&v, ver); err != nil {
			return nil, err
		}
		op, err := putJSON(key, v)
		if err != nil {
			return nil, err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: key, ExpectedVersion: ver}}, []store.Op{op}, nil)
		if err != nil {
			return nil, fmt.Errorf("update %s: %w", key, err)
		}
		if ok {
			return &v, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("update %s: %w", key, err)
		}
	}
}
