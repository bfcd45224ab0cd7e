package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"path/filepath"
	"testing"
	"time"

	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

// TestMembership grows a one-member cluster by a learner, promotes it,
// refuses a member beyond the quorum size, and removes the member again.
func TestMembership(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, firstPeer := firstMember(t)

	second := storetest.Config(t)
	second.Name, second.ListenPeerURLs = "b", []string{freeURL(t)}
	peer := second.ListenPeerURLs[0]
	id, initial, err := st.AddLearner(ctx, "b", peer, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a=" + firstPeer + ",b=" + peer; initial != want && initial != "b="+peer+",a="+firstPeer {
		t.Errorf("initial cluster %q, want %q", initial, want)
	}
	// The same join again (a retry) gets the same member.
	if again, _, err := st.AddLearner(ctx, "b", peer, 3); err != nil || again != id {
		t.Errorf("second AddLearner of b: %x, %v; want the member %x again", again, err, id)
	}
	third := freeURL(t)
	if _, _, err := st.AddLearner(ctx, "c", third, 3); !errors.Is(err, store.ErrMemberJoining) {
		t.Errorf("AddLearner while b is a learner: %v, want ErrMemberJoining", err)
	}

	second.InitialCluster, second.ClusterState = initial, "existing"
	second.DataDir = filepath.Join(t.TempDir(), "b")
	storetest.Start(t, second)
	if err := st.PromoteMember(ctx, id); err != nil {
		t.Fatal(err)
	}
	ms, err := st.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Learner || ms[1].Learner {
		t.Fatalf("members after the promotion: %+v, want a and b voting", ms)
	}
	if _, _, err := st.AddLearner(ctx, "c", third, 2); !errors.Is(err, store.ErrQuorumFull) {
		t.Errorf("AddLearner beyond 2 members: %v, want ErrQuorumFull", err)
	}

	removed, err := st.RemoveMember(ctx, "b", peer)
	if err != nil || !removed {
		t.Fatalf("RemoveMember b: %v, %v", removed, err)
	}
	if ms, err := st.Members(ctx); err != nil || len(ms) != 1 || ms[0].Name != "a" {
		t.Errorf("members after removing b: %+v, %v; want a alone", ms, err)
	}
	if removed, err := st.RemoveMember(ctx, "b", peer); err != nil || removed {
		t.Errorf("RemoveMember of a non-member: %v, %v; want false, nil", removed, err)
	}
}

// TestLeaveQuorumThroughItself: a member that removes itself through its
// own etcd server leaves, whether or not the answer comes back before that
// server stops; when it does not, the error says so (ErrMemberStopped);
// and b's server stops.
func TestLeaveQuorumThroughItself(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, _ := firstMember(t)
	b := joinMember(ctx, t, st, "b")
	if b.RemovedFromCluster() {
		t.Fatal("b says it was removed before it left")
	}
	self := store.New(b.Client())
	t.Cleanup(func() { self.Close() })
	always := func(store.Member) bool { return true }
	voters, err := self.LeaveQuorum(ctx, "b", always)
	if err != nil && !errors.Is(err, store.ErrMemberStopped) {
		t.Fatalf("b leaving through its own server: %v; want nil or ErrMemberStopped", err)
	}
	if voters != 1 {
		t.Errorf("b leaving: %d voting members stay, want 1 (error %v)", voters, err)
	}
	// b stops either way: it applies its own removal, or the others tell
	// it it was removed (when the leader dropped it before b saw the
	// removal committed; b then never applies it, and RemovedFromCluster
	// stays false).
	select {
	case <-b.Stopped():
	case <-time.After(30 * time.Second):
		t.Error("b's etcd server still runs 30 s after b left")
	}
	if ms, err := st.Members(ctx); err != nil || len(ms) != 1 || ms[0].Name != "a" {
		t.Errorf("members after b left: %+v, %v; want a alone", ms, err)
	}
}

// firstMember starts member "a" of a new cluster, its peers reaching it
// over TCP (a unix peer URL serves no cluster information to a joining
// member), and returns a store of it and its peer URL.
func firstMember(t *testing.T) (*store.Etcd, string) {
	t.Helper()
	cfg := storetest.Config(t)
	cfg.Name, cfg.ListenPeerURLs = "a", []string{freeURL(t)}
	st := store.New(storetest.Start(t, cfg).Client())
	t.Cleanup(func() { st.Close() })
	return st, cfg.ListenPeerURLs[0]
}

// joinMember adds member name to st's cluster as a learner, starts it
// and promotes it to a voting member.
func joinMember(ctx context.Context, t *testing.T, st *store.Etcd, name string) *store.Embedded {
	t.Helper()
	cfg := storetest.Config(t)
	cfg.Name, cfg.ListenPeerURLs = name, []string{freeURL(t)}
	id, initial, err := st.AddLearner(ctx, name, cfg.ListenPeerURLs[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	cfg.InitialCluster, cfg.ClusterState = initial, "existing"
	m := storetest.Start(t, cfg)
	if err := st.PromoteMember(ctx, id); err != nil {
		t.Fatal(err)
	}
	return m
}

// freeURL is an http URL on a port that was free a moment ago, on an
// address of 127.0.0.0/8 picked at random: another test's listener on
// 127.0.0.1:0 cannot take the port in between.
func freeURL(t *testing.T) string {
	t.Helper()
	ip := net.IPv4(127, byte(1+rand.IntN(254)), byte(rand.IntN(256)), byte(1+rand.IntN(254)))
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// TestLeaveQuorum: a member leaves a 3-member cluster only while the
// members left keep a quorum of started ones, and the last voting member
// never leaves.
func TestLeaveQuorum(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	st, _ := firstMember(t)
	stopped := map[string]bool{}
	started := func(m store.Member) bool { return !stopped[m.Name] }
	if _, err := st.LeaveQuorum(ctx, "a", started); !errors.Is(err, store.ErrLastMember) {
		t.Fatalf("LeaveQuorum of the only member: %v, want ErrLastMember", err)
	}
	members := map[string]*store.Embedded{}
	for _, name := range []string{"b", "c"} {
		members[name] = joinMember(ctx, t, st, name)
	}
	// c stops: a leaving would leave b alone of two, no quorum.
	if err := members["c"].Close(); err != nil {
		t.Fatal(err)
	}
	stopped["c"] = true
	if _, err := st.LeaveQuorum(ctx, "a", started); !errors.Is(err, store.ErrNoQuorumLeft) {
		t.Fatalf("LeaveQuorum of a with c stopped: %v, want ErrNoQuorumLeft", err)
	}
	if ms, err := st.Members(ctx); err != nil || len(ms) != 3 {
		t.Fatalf("members after the refusal: %+v, %v; want all 3", ms, err)
	}
	// c leaves instead (it is stopped: a and b stay, both started).
	if voters, err := st.LeaveQuorum(ctx, "c", started); err != nil || voters != 2 {
		t.Fatalf("LeaveQuorum of c: %d, %v; want 2 voting members left", voters, err)
	}
	if ms, err := st.Members(ctx); err != nil || len(ms) != 2 {
		t.Errorf("members after c left: %+v, %v; want a and b", ms, err)
	}
	if voters, err := st.LeaveQuorum(ctx, "c", started); err != nil || voters != 0 {
		t.Errorf("LeaveQuorum of a non-member: %d, %v; want 0, nil", voters, err)
	}
}
