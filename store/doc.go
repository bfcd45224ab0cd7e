// Package store is KAT's cluster state: the StateStore interface and its
// etcd implementation, Etcd, with leader election, etcd users and
// snapshots, plus an embedded etcd member for kat-agent (Embedded).
//
// etcd is the only cluster state, see
// docs/architecture.md "etcd is the only state". Every etcd member node
// runs an embedded member; workers Dial the members, and a cluster made
// with --etcd-endpoints Dials an external etcd instead. Code above this
// package depends on StateStore and, where it needs more (list-then-watch,
// leases, fencing), on *Etcd.
//
//	emb, err := store.StartEmbedded(ctx, store.EmbedConfig{DataDir: "/var/lib/kat/etcd"})
//	if err != nil { ... }
//	defer emb.Close()
//	st := store.New(emb.Client())
//	defer st.Close() // runs before emb.Close
//
//	err = st.Put(ctx, "/kat/config/cluster_uid", []byte(uid))
//	kv, err := st.Get(ctx, "/kat/config/cluster_uid") // errors.Is(err, store.ErrNotFound) when absent
//
// # Revisions and compare-and-swap
//
// Every write gets a store-wide revision. KV.Version is the revision of a
// key's last change (etcd's ModRevision), and Compare uses it: a transaction
// whose Compare{Key, ExpectedVersion: kv.Version} still holds commits, one
// that lost a race does not. ExpectedVersion 0 means "the key must not
// exist", which makes create-if-absent:
//
//	ok, err := st.DoTransaction(ctx,
//		[]store.Compare{{Key: k, ExpectedVersion: 0}},
//		[]store.Op{{Type: store.OpPut, Key: k, Value: v}}, nil)
//
// # Watching
//
// Watch delivers changes to a key, or to a prefix when the argument ends in
// "/". To build a view without missing a change, list then watch from the
// list's revision + 1 (ListWithRevision). Watches survive etcd compaction by
// relisting; Etcd.Watch documents what a consumer sees then.
//
// # Leader election
//
// Campaign blocks until the caller leads and returns a context that ends
// when leadership does (lease lost, Resign, Close, or the caller's context).
// The leader runs its loops under that context. LeadershipCompare is a
// check that holds only while the caller leads, for a write that must not
// commit once its lease is lost; KAT's loops guard their writes with the
// versions they decided from instead (docs/architecture.md "etcd is the only state").
//
// # Embedded etcd
//
// StartEmbedded starts a member and waits until it serves. Compaction is on
// by default (keep the last 1000 revisions). Close is idempotent; close stores
// built on the member's Client first. Package storetest starts a throwaway
// member on unix sockets for tests.
package store
