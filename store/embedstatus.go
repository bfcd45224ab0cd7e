package store

// MemberStatus is what an embedded member knows of itself and its cluster,
// read from the server without a request (so it needs no etcd user).
type MemberStatus struct {
	// IsLeader is true when this member is the raft leader.
	IsLeader bool
	// HasLeader is true when the member knows a raft leader.
	HasLeader bool
	// IsLearner is true while the member is a learner.
	IsLearner bool
	// DBSizeBytes is the size of the backend database file;
	// DBSizeInUseBytes the part of it in use.
	DBSizeBytes, DBSizeInUseBytes int64
	// Members is the number of members of the cluster, learners included.
	Members int
}

// Status returns the member's status.
func (e *Embedded) Status() MemberStatus {
	s := e.etcd.Server
	lead := s.Leader() // 0 (raft.None) while there is no leader
	be := s.Backend()
	return MemberStatus{
		IsLeader: lead != 0 && lead == s.MemberID(), HasLeader: lead != 0,
		IsLearner: s.IsLearner(), DBSizeBytes: be.Size(), DBSizeInUseBytes: be.SizeInUse(),
		Members: len(s.Cluster().Members()),
	}
}
