package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// longTTL is an election lease TTL far longer than any wait in these tests:
// a hand-over that waited for the lease to expire would time out.
const longTTL = 60

// waitDone fails the test unless ctx is done in time, and returns its cause.
func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("leadership context not cancelled")
		return nil
	}
}

func TestCampaignResign(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	st := store.New(emb.Client())
	t.Cleanup(func() { _ = st.Close() })
	ctx := testCtx(t)

	if _, err := st.GetLeader(ctx); !errors.Is(err, store.ErrNoLeader) {
		t.Fatalf("GetLeader before any campaign = %v, want ErrNoLeader", err)
	}
	if err := st.Resign(ctx); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("Resign before any campaign = %v, want ErrNotLeader", err)
	}
	if _, ok := st.LeadershipCompare(); ok {
		t.Fatal("LeadershipCompare ok before any campaign")
	}

	lctx, err := st.Campaign(ctx, "node-a", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	if lctx.Err() != nil {
		t.Fatalf("leadership context done at once: %v", context.Cause(lctx))
	}
	if got, err := st.GetLeader(ctx); err != nil || got != "node-a" {
		t.Fatalf("GetLeader = %q, %v, want node-a", got, err)
	}
	if _, err := st.Campaign(ctx, "node-a", longTTL); !errors.Is(err, store.ErrAlreadyCampaigning) {
		t.Fatalf("second Campaign = %v, want ErrAlreadyCampaigning", err)
	}
	fence, ok := st.LeadershipCompare()
	if !ok {
		t.Fatal("LeadershipCompare not ok while leading")
	}
	fenced := func() bool {
		t.Helper()
		ok, err := st.DoTransaction(ctx, []store.Compare{fence},
			[]store.Op{{Type: store.OpPut, Key: "/fenced", Value: []byte("x")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !fenced() {
		t.Fatal("fenced write refused while leading")
	}

	if err := st.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if cause := waitDone(t, lctx); !errors.Is(cause, store.ErrResigned) {
		t.Fatalf("cause = %v, want ErrResigned", cause)
	}
	if _, err := st.GetLeader(ctx); !errors.Is(err, store.ErrNoLeader) {
		t.Fatalf("GetLeader after Resign = %v, want ErrNoLeader", err)
	}
	if fenced() {
		t.Fatal("fenced write committed after Resign")
	}
	if err := st.Resign(ctx); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("second Resign = %v, want ErrNotLeader", err)
	}

	// Leadership can be won again, without waiting for the old lease.
	lctx2, err := st.Campaign(ctx, "node-a2", longTTL)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := st.GetLeader(ctx); got != "node-a2" {
		t.Fatalf("GetLeader = %q, want node-a2", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := waitDone(t, lctx2); !errors.Is(cause, store.ErrClosed) {
		t.Fatalf("cause after Close = %v, want ErrClosed", cause)
	}
	if _, err := st.Campaign(ctx, "node-a3", longTTL); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Campaign after Close = %v, want ErrClosed", err)
	}
}

// leader reads the current leader key.
func leader(t *testing.T, cli *clientv3.Client) *mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(testCtx(t), store.DefaultElectionPrefix+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read leader key: %v", err)
	}
	return resp.Kvs[0]
}

// leaderLease returns the lease of the current leader key.
func leaderLease(t *testing.T, cli *clientv3.Client) clientv3.LeaseID {
	t.Helper()
	return clientv3.LeaseID(leader(t, cli).Lease)
}

// leaderKey returns the current leader key.
func leaderKey(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	return string(leader(t, cli).Key)
}

func TestLeadershipHandOver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// end ends a's leadership.
		end       func(t *testing.T, cli *clientv3.Client, a *store.Etcd, cancelA context.CancelFunc)
		wantCause error
	}{
		{
			name: "lease revoked",
			end: func(t *testing.T, cli *clientv3.Client, _ *store.Etcd, _ context.CancelFunc) {
				t.Helper()
				if _, err := cli.Revoke(testCtx(t), leaderLease(t, cli)); err != nil {
					t.Fatal(err)
				}
			},
			wantCause: store.ErrLeadershipLost,
		},
		{
			name: "leader key deleted",
			end: func(t *testing.T, cli *clientv3.Client, _ *store.Etcd, _ context.CancelFunc) {
				t.Helper()
				if _, err := cli.Delete(testCtx(t), leaderKey(t, cli)); err != nil {
					t.Fatal(err)
				}
			},
			wantCause: store.ErrLeadershipLost,
		},
		{
			name: "resign",
			end: func(t *testing.T, _ *clientv3.Client, a *store.Etcd, _ context.CancelFunc) {
				t.Helper()
				if err := a.Resign(testCtx(t)); err != nil {
					t.Fatal(err)
				}
			},
			wantCause: store.ErrResigned,
		},
		{
			name: "store closed",
			end: func(t *testing.T, _ *clientv3.Client, a *store.Etcd, _ context.CancelFunc) {
				t.Helper()
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
			},
			wantCause: store.ErrClosed,
		},
		{
			name: "campaign context cancelled",
			end: func(_ *testing.T, _ *clientv3.Client, _ *store.Etcd, cancelA context.CancelFunc) {
				cancelA()
			},
			wantCause: context.Canceled,
		},
	}
	emb := storetest.NewEmbedded(t)
	cli := emb.Client()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := store.New(cli), store.New(cli)
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			ctxA, cancelA := context.WithCancel(testCtx(t))
			defer cancelA()
			lctxA, err := a.Campaign(ctxA, "a", longTTL)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				lctx context.Context
				err  error
			}
			won := make(chan result, 1)
			bctx := testCtx(t)
			go func() {
				lctx, err := b.Campaign(bctx, "b", longTTL)
				won <- result{lctx, err}
			}()
			// b is queued behind a, not elected.
			polltest.Until(t, 5*time.Second, "the second candidate queues", func() bool {
				resp, err := cli.Get(testCtx(t), store.DefaultElectionPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err == nil && resp.Count == 2
			})
			select {
			case r := <-won:
				t.Fatalf("b elected while a leads: %v", r.err)
			default:
			}

			tc.end(t, cli, a, cancelA)
			if cause := waitDone(t, lctxA); !errors.Is(cause, tc.wantCause) {
				t.Fatalf("a's cause = %v, want %v", cause, tc.wantCause)
			}
			select {
			case r := <-won:
				if r.err != nil {
					t.Fatalf("b's Campaign: %v", r.err)
				}
				if r.lctx.Err() != nil {
					t.Fatalf("b's leadership already over: %v", context.Cause(r.lctx))
				}
			case <-time.After(10 * time.Second):
				t.Fatal("b not elected after a's leadership ended")
			}
			if got, err := b.GetLeader(testCtx(t)); err != nil || got != "b" {
				t.Fatalf("GetLeader = %q, %v, want b", got, err)
			}
			if err := b.Resign(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCampaignWaitCancelled(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	a, b := store.New(emb.Client()), store.New(emb.Client())
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	ctx := testCtx(t)
	if _, err := a.Campaign(ctx, "a", longTTL); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := b.Campaign(short, "b", longTTL); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign with a short context = %v, want DeadlineExceeded", err)
	}
	// b's candidacy is withdrawn: after a resigns there is no leader.
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetLeader(ctx); !errors.Is(err, store.ErrNoLeader) {
		t.Fatalf("GetLeader = %v, want ErrNoLeader", err)
	}
	// And b may campaign again.
	if _, err := b.Campaign(ctx, "b", longTTL); err != nil {
		t.Fatal(err)
	}
}

// TestPartitionedLeaderStepsDown cuts the leader off from etcd: it cannot
// refresh its lease nor see its key vanish, yet must give up leadership by
// itself once the lease TTL has passed, while another candidate takes over.
func TestPartitionedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	ctx := testCtx(t)
	a, p := dialThroughProxy(t, ctx, emb)
	b := store.New(emb.Client())
	t.Cleanup(func() { _ = b.Close() })

	const ttl = 2
	lctxA, err := a.Campaign(ctx, "a", ttl)
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() {
		_, err := b.Campaign(ctx, "b", ttl)
		won <- err
	}()
	p.cut()
	if cause := waitDone(t, lctxA); !errors.Is(cause, store.ErrLeadershipLost) {
		t.Fatalf("a's cause = %v, want ErrLeadershipLost", cause)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b not elected after a's lease expired")
	}
	if got, err := b.GetLeader(ctx); err != nil || got != "b" {
		t.Fatalf("GetLeader = %q, %v, want b", got, err)
	}
}

// TestRestartedCandidateReclaimsItsStaleLeadership simulates a leader killed
// without resigning: its candidacy key and lease outlive it. A new run with the
// same ID must take over at once, while a different ID still has to wait.
func TestRestartedCandidateReclaimsItsStaleLeadership(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	ctx := testCtx(t)

	// The dead leader: a session that is never closed and whose lease lives
	// far longer than the test.
	dead, err := concurrency.NewSession(emb.Client(), concurrency.WithTTL(longTTL))
	if err != nil {
		t.Fatal(err)
	}
	dead.Orphan()
	if err := concurrency.NewElection(dead, store.DefaultElectionPrefix).Campaign(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}

	other := store.New(emb.Client())
	t.Cleanup(func() { _ = other.Close() })
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := other.Campaign(wctx, "node-b", longTTL); err == nil {
		t.Fatal("a different candidate became leader while the stale leader's lease is alive")
	}

	restarted := store.New(emb.Client())
	t.Cleanup(func() { _ = restarted.Close() })
	start := time.Now()
	lctx, err := restarted.Campaign(ctx, "node-a", longTTL)
	if err != nil {
		t.Fatalf("restarted candidate: %v", err)
	}
	if lctx.Err() != nil {
		t.Fatalf("leadership context done at once: %v", context.Cause(lctx))
	}
	if got, err := restarted.GetLeader(ctx); err != nil || got != "node-a" {
		t.Fatalf("GetLeader = %q, %v, want node-a", got, err)
	}
	t.Logf("restarted candidate took over in %s (the stale lease had %ds left)", time.Since(start).Round(time.Millisecond), longTTL)
}
