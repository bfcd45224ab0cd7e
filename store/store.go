package store

import (
	"context"
	"errors"
)

// KV is one key with its value, as read from the store.
type KV struct {
	// Key is the full key.
	Key string
	// Value is the stored value. It is nil in Delete events.
	Value []byte
	// Version is the revision of the last change to the key (etcd's
	// ModRevision). Use it as Compare.ExpectedVersion for compare-and-swap.
	// In a Delete event it is the revision of the deletion.
	Version int64
	// CreateRevision is the revision at which the key was created (0 in
	// Delete events).
	CreateRevision int64
}

// EventType says whether a WatchEvent is a write or a deletion.
type EventType int

// The event types a watch delivers.
const (
	// EventTypePut reports that a key was created or changed.
	EventTypePut EventType = iota
	// EventTypeDelete reports that a key was deleted.
	EventTypeDelete
)

// String returns "put" or "delete".
func (t EventType) String() string {
	switch t {
	case EventTypePut:
		return "put"
	case EventTypeDelete:
		return "delete"
	default:
		return "unknown"
	}
}

// WatchEvent is one change delivered by StateStore.Watch.
type WatchEvent struct {
	// Type is EventTypePut or EventTypeDelete.
	Type EventType
	// KV is the key after the change. For a Delete only Key and Version are
	// set.
	KV KV
	// PrevKV is the key before the change, or nil when it did not exist or is
	// unknown (see the compaction notes on Etcd.Watch).
	PrevKV *KV
	// Last is true on the last event of a revision: the changes of one
	// transaction share a revision and arrive together, so a consumer that
	// applied every event up to one marked Last holds whole transactions.
	Last bool
}

// Compare is a condition of a transaction: the key's last-change revision
// (KV.Version) must equal ExpectedVersion.
type Compare struct {
	// Key is the key to check.
	Key string
	// ExpectedVersion is the required KV.Version (etcd ModRevision); 0 means
	// the key must not exist.
	ExpectedVersion int64
	// Prefix applies the check to every key starting with Key, atomically:
	// with ExpectedVersion 0 it means "no key with this prefix exists", which
	// fences a transaction against a concurrent create under the prefix.
	Prefix bool
}

// OpType selects what an Op does.
type OpType int

// The operations a transaction can run.
const (
	// OpPut writes Op.Value at Op.Key.
	OpPut OpType = iota
	// OpDelete deletes Op.Key (no error when it does not exist).
	OpDelete
	// OpGet reads Op.Key; see Etcd.Txn for its result.
	OpGet
	// OpDeletePrefix deletes every key that starts with Op.Key. An empty
	// Op.Key is refused, so a transaction can never wipe the whole store.
	OpDeletePrefix
)

// String returns the operation's name.
func (t OpType) String() string {
	switch t {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpGet:
		return "get"
	case OpDeletePrefix:
		return "delete-prefix"
	default:
		return "unknown"
	}
}

// Op is one operation of a transaction.
type Op struct {
	// Type is the operation.
	Type OpType
	// Key is the key, or the prefix for OpDeletePrefix.
	Key string
	// Value is the value to write (OpPut only).
	Value []byte
}

// StateStore is how KAT components read and write cluster state.
// Etcd is its implementation.
type StateStore interface {
	// Put writes value at key.
	Put(ctx context.Context, key string, value []byte) error
	// Get reads key. It returns an error wrapping ErrNotFound when the key
	// does not exist.
	Get(ctx context.Context, key string) (*KV, error)
	// Delete deletes key. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List returns every key that starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]KV, error)
	// ListWithRevision is List that also returns the store revision the
	// listing reflects: Watch from that revision + 1 misses no change.
	ListWithRevision(ctx context.Context, prefix string) ([]KV, int64, error)
	// Count returns how many keys start with prefix, reading no value.
	Count(ctx context.Context, prefix string) (int64, error)
	// FirstKeys returns the first n keys (sorted) that start with prefix,
	// without their values.
	FirstKeys(ctx context.Context, prefix string, n int) ([]string, error)
	// Scan calls fn for every key that starts with prefix, sorted by key,
	// all at one store revision, which it returns, without holding them all
	// at once. An error from fn stops the scan and is returned.
	Scan(ctx context.Context, prefix string, fn func(KV) error) (int64, error)
	// Watch streams changes to a key, or to a prefix when keyOrPrefix ends in
	// "/", from startRevision (0: from now). The channel is closed when ctx
	// ends.
	Watch(ctx context.Context, keyOrPrefix string, startRevision int64) (<-chan WatchEvent, error)
	// Close releases the store.
	Close() error
	// Campaign blocks until this caller is the leader, then returns a
	// context that is cancelled when leadership is lost or given up.
	Campaign(ctx context.Context, leaderID string, leaseTTLSeconds int64) (leadershipCtx context.Context, err error)
	// Resign gives up the leadership won by Campaign.
	Resign(ctx context.Context) error
	// GetLeader returns the current leader's ID, or an error wrapping
	// ErrNoLeader.
	GetLeader(ctx context.Context) (leaderID string, err error)
	// DoTransaction runs onSuccess when every check holds and onFailure
	// otherwise, atomically, and reports whether the checks held.
	DoTransaction(ctx context.Context, checks []Compare, onSuccess []Op, onFailure []Op) (committed bool, err error)
	// Txn is DoTransaction that also returns the store revision after the
	// transaction and what each op did.
	Txn(ctx context.Context, checks []Compare, onSuccess []Op, onFailure []Op) (*TxnResult, error)
}

// Errors returned by the store. Test for them with errors.Is.
var (
	// ErrNotFound is returned by Get when the key does not exist.
	ErrNotFound = errors.New("store: key not found")
	// ErrNoLeader is returned by GetLeader when no leader is elected.
	ErrNoLeader = errors.New("store: no leader")
	// ErrNotLeader is returned by Resign when this store does not hold
	// leadership.
	ErrNotLeader = errors.New("store: not leader")
	// ErrAlreadyCampaigning is returned by Campaign when this store is already
	// campaigning or holds leadership.
	ErrAlreadyCampaigning = errors.New("store: campaign already in progress")
	// ErrLeadershipLost is the cause (see context.Cause) of a leadership
	// context cancelled because the election lease expired or the leader key
	// was deleted.
	ErrLeadershipLost = errors.New("store: leadership lost")
	// ErrResigned is the cause of a leadership context cancelled by Resign.
	ErrResigned = errors.New("store: resigned")
	// ErrClosed is returned by operations on a closed store, and is the cause
	// of a leadership context cancelled by Close.
	ErrClosed = errors.New("store: closed")
	// ErrInvalidArgument is returned for an empty key, an unknown OpType, an
	// empty OpDeletePrefix prefix or a negative revision.
	ErrInvalidArgument = errors.New("store: invalid argument")
	// ErrLeaseLost is returned by KeepAlive when the lease expired or was
	// revoked.
	ErrLeaseLost = errors.New("store: lease lost")
)
