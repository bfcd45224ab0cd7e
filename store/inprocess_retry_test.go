package store

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// unavailableKV answers every call with err until fails calls have been
// made, then succeeds: the member's etcd server as it answers while its
// Raft leader changes.
type unavailableKV struct {
	pb.KVClient
	err   error
	fails int
	calls int
}

func (u *unavailableKV) answer() error {
	u.calls++
	if u.calls <= u.fails {
		return u.err
	}
	return nil
}

func (u *unavailableKV) Range(context.Context, *pb.RangeRequest, ...grpc.CallOption) (*pb.RangeResponse, error) {
	if err := u.answer(); err != nil {
		return nil, err
	}
	return &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 7}}, nil
}

func (u *unavailableKV) Put(context.Context, *pb.PutRequest, ...grpc.CallOption) (*pb.PutResponse, error) {
	if err := u.answer(); err != nil {
		return nil, err
	}
	return &pb.PutResponse{}, nil
}

// TestInProcessReadsRideOutALeaderChange: an in-process read etcd cannot
// serve for the moment is asked again, as etcd's gRPC client asks again;
// a write is not (it may have been applied), nor is a read refused for
// good.
func TestInProcessReadsRideOutALeaderChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	id := &identity{}
	for _, transient := range []error{rpctypes.ErrGRPCLeaderChanged, rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCTimeout} {
		kv := &unavailableKV{err: transient, fails: 3}
		resp, err := (&kvAs{kvs: kv, id: id}).Range(ctx, &pb.RangeRequest{Key: []byte("/k")})
		if err != nil || resp.Header.Revision != 7 || kv.calls != 4 {
			t.Errorf("read through %q: %v, %v after %d calls; want the answer of the 4th", transient, resp, err, kv.calls)
		}
		kv = &unavailableKV{err: transient, fails: 3}
		if _, err := (&kvAs{kvs: kv, id: id}).Put(ctx, &pb.PutRequest{Key: []byte("/k")}); !errors.Is(err, transient) || kv.calls != 1 {
			t.Errorf("write through %q: %v after %d calls; want that error after 1", transient, err, kv.calls)
		}
	}
	kv := &unavailableKV{err: rpctypes.ErrGRPCCompacted, fails: 1}
	if _, err := (&kvAs{kvs: kv, id: id}).Range(ctx, &pb.RangeRequest{Key: []byte("/k")}); !errors.Is(err, rpctypes.ErrGRPCCompacted) || kv.calls != 1 {
		t.Errorf("read of a compacted revision: %v after %d calls; want that error after 1", err, kv.calls)
	}
	kv = &unavailableKV{err: rpctypes.ErrGRPCLeaderChanged, fails: readRetries + 10}
	if _, err := (&kvAs{kvs: kv, id: id}).Range(ctx, &pb.RangeRequest{Key: []byte("/k")}); !errors.Is(err, rpctypes.ErrGRPCLeaderChanged) || kv.calls != readRetries+1 {
		t.Errorf("read while etcd stays unavailable: %v after %d calls; want that error after %d", err, kv.calls, readRetries+1)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	kv = &unavailableKV{err: rpctypes.ErrGRPCLeaderChanged, fails: 3}
	if _, err := (&kvAs{kvs: kv, id: id}).Range(cancelled, &pb.RangeRequest{Key: []byte("/k")}); err == nil || kv.calls != 1 {
		t.Errorf("read with its context ended: %v after %d calls; want an error after 1", err, kv.calls)
	}
}
