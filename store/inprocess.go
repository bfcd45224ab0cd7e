package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ServeInProcess routes cli's reads, writes, transactions and watches to
// this member by function calls instead of gRPC over TLS, acting as the
// user certPEM names (its common name, as etcd's client-certificate
// authentication takes it from a TLS client); leases, membership,
// maintenance and authentication calls keep going through cli's
// connection. cli must be a client of this member holding that
// certificate, so that the calls it makes either way are the same user's:
// the identity never leaves the process, and remote clients are
// authenticated as before. A member's own leader loops and API handlers
// so skip a TLS record, a gRPC frame and a protobuf encoding each way of
// every request and watch event. Call it before cli is used; Close of cli
// stops the in-process watches too.
func (e *Embedded) ServeInProcess(cli *clientv3.Client, certPEM []byte) error {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return errors.New("serve etcd in process: the client certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("serve etcd in process: parse the client certificate: %w", err)
	}
	as := &identity{peer: &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{
		VerifiedChains: [][]*x509.Certificate{{cert}}}}}}
	cli.KV = clientv3.NewKVFromKVClient(&kvAs{kvs: adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(e.etcd.Server)), id: as}, cli)
	grpcWatcher := cli.Watcher
	w := clientv3.NewWatchFromWatchClient(&watchAs{ws: adapter.WatchServerToWatchClient(v3rpc.NewWatchServer(e.etcd.Server)), id: as}, cli)
	cli.Watcher = &blankWatcher{w}
	// Its gRPC watcher never watched: nothing else closes it.
	return grpcWatcher.Close()
}

// identity is a user as etcd's authentication finds it on a request that
// came over TLS with that user's verified certificate.
type identity struct {
	peer *peer.Peer
}

// on returns ctx carrying the identity: the TLS peer etcd reads the common
// name from, and the (empty) request metadata it requires beside it.
func (id *identity) on(ctx context.Context) context.Context {
	if _, ok := metadata.FromIncomingContext(ctx); !ok {
		ctx = metadata.NewIncomingContext(ctx, metadata.MD{})
	}
	return peer.NewContext(ctx, id.peer)
}

// kvAs is an in-process KV client acting as id. A request etcd refused
// because its users or roles changed while it waited (ErrAuthOldRevision:
// a node joined, say) is asked again with the identity taken anew: the
// refusal came before anything was applied. Over gRPC, the same refusal
// reaches the caller. A read etcd could not serve for the moment (the
// Raft leader changed, none is elected yet, the request timed out) is
// asked again after a pause, as etcd's client does over gRPC for reads
// only: a write may have been applied before such an answer.
type kvAs struct {
	kvs pb.KVClient
	id  *identity
}

const (
	// authRetries bounds how often kvAs asks again after
	// ErrAuthOldRevision.
	authRetries = 5
	// readRetries and readRetryWait are etcd client's defaults for reads
	// over gRPC: up to 100 tries, 25 ms apart.
	readRetries   = 100
	readRetryWait = 25 * time.Millisecond
)

// asked calls f as id, again while etcd answers that the auth store
// changed meanwhile, and, for a read, while etcd is unavailable.
func asked[T any](ctx context.Context, id *identity, read bool, f func(context.Context) (T, error)) (T, error) {
	auth, unavailable := 0, 0
	for {
		r, err := f(id.on(ctx))
		switch {
		case err == nil || ctx.Err() != nil:
			return r, err
		case errors.Is(rpctypes.Error(err), rpctypes.ErrAuthOldRevision) && auth < authRetries:
			auth++
		case read && status.Code(err) == codes.Unavailable && unavailable < readRetries:
			unavailable++
			t := time.NewTimer(readRetryWait)
			select {
			case <-ctx.Done():
				t.Stop()
				return r, err
			case <-t.C:
			}
		default:
			return r, err
		}
	}
}

func (k *kvAs) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	return asked(ctx, k.id, true, func(ctx context.Context) (*pb.RangeResponse, error) { return k.kvs.Range(ctx, in, opts...) })
}

func (k *kvAs) RangeStream(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.RangeStreamResponse], error) {
	return k.kvs.RangeStream(k.id.on(ctx), in, opts...)
}

func (k *kvAs) Put(ctx context.Context, in *pb.PutRequest, opts ...grpc.CallOption) (*pb.PutResponse, error) {
	return asked(ctx, k.id, false, func(ctx context.Context) (*pb.PutResponse, error) { return k.kvs.Put(ctx, in, opts...) })
}

func (k *kvAs) DeleteRange(ctx context.Context, in *pb.DeleteRangeRequest, opts ...grpc.CallOption) (*pb.DeleteRangeResponse, error) {
	return asked(ctx, k.id, false, func(ctx context.Context) (*pb.DeleteRangeResponse, error) { return k.kvs.DeleteRange(ctx, in, opts...) })
}

func (k *kvAs) Txn(ctx context.Context, in *pb.TxnRequest, opts ...grpc.CallOption) (*pb.TxnResponse, error) {
	return asked(ctx, k.id, false, func(ctx context.Context) (*pb.TxnResponse, error) { return k.kvs.Txn(ctx, in, opts...) })
}

func (k *kvAs) Compact(ctx context.Context, in *pb.CompactionRequest, opts ...grpc.CallOption) (*pb.CompactionResponse, error) {
	return asked(ctx, k.id, false, func(ctx context.Context) (*pb.CompactionResponse, error) { return k.kvs.Compact(ctx, in, opts...) })
}

// watchAs is an in-process watch client acting as id.
type watchAs struct {
	ws pb.WatchClient
	id *identity
}

func (w *watchAs) Watch(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.WatchRequest, pb.WatchResponse], error) {
	return w.ws.Watch(w.id.on(ctx), opts...)
}

// blankWatcher hides a watch's context from its String method, as etcd's
// own in-process client does: request tracing reads it unsynchronized.
type blankWatcher struct{ clientv3.Watcher }

func (b *blankWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	return b.Watcher.Watch(blankContext{ctx}, key, opts...)
}

type blankContext struct{ context.Context }

func (blankContext) String() string { return "(in-process watch)" }
