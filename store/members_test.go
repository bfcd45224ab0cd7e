package store_test

import (
	"context"
	"errors"
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
	// Members reach each other over TCP: a unix peer URL serves no
	// cluster information to a joining member.
	first := storetest.Config(t)
	first.Name, first.ListenPeerURLs = "a", []string{freeURL(t)}
	a := storetest.Start(t, first)
	st := store.New(a.Client())
	t.Cleanup(func() { st.Close() })

	second := storetest.Config(t)
	second.Name, second.ListenPeerURLs = "b", []string{freeURL(t)}
	peer := second.ListenPeerURLs[0]
	id, initial, err := st.AddLearner(ctx, "b", peer, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a=" + first.ListenPeerURLs[0] + ",b=" + peer; initial != want && initial != "b="+peer+",a="+first.ListenPeerURLs[0] {
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

// freeURL is an http URL on a loopback port that was free a moment ago.
func freeURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}
