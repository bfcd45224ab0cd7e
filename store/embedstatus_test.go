package store_test

import (
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/storetest"
)

func TestEmbeddedStatusOfASingleMember(t *testing.T) {
	t.Parallel()
	emb := storetest.NewEmbedded(t)
	// A single member elects itself; Start returns once it serves.
	var s store.MemberStatus
	polltest.Until(t, 10*time.Second, "the member leads", func() bool {
		s = emb.Status()
		return s.IsLeader
	})
	if !s.HasLeader || s.IsLearner || s.Members != 1 {
		t.Errorf("status = %+v, want a leader of a cluster of 1 that is no learner", s)
	}
	if s.DBSizeBytes <= 0 || s.DBSizeInUseBytes <= 0 || s.DBSizeInUseBytes > s.DBSizeBytes {
		t.Errorf("database sizes %d (in use %d): want 0 < in use <= size", s.DBSizeBytes, s.DBSizeInUseBytes)
	}
}
