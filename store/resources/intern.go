package resources

import (
	"unique"

	"kat.dws.rip/kat/api"
)

// Interning: the leader's caches hold a decoded meta, status and rollout
// record of every workload, and encoding/json gives each decoded string its
// own copy. Most of those strings are the same in thousands of workloads (a
// namespace, a source and its commit, a phase, a condition's reason and
// message), so a cache keeps one canonical copy of each instead.

// intern returns the canonical copy of s.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// InternMeta replaces the strings of m that many workloads share by
// canonical copies, for a cache that holds m.
func InternMeta(m *api.WorkloadMeta) {
	m.Namespace, m.Type = intern(m.Namespace), intern(m.Type)
	m.Owner.Kind, m.Owner.Source, m.Owner.Commit = intern(m.Owner.Kind), intern(m.Owner.Source), intern(m.Owner.Commit)
	for i, f := range m.Files {
		m.Files[i] = intern(f)
	}
}

// InternStatus replaces the strings of s that many workloads share by
// canonical copies, for a cache that holds s.
func InternStatus(s *api.WorkloadStatus) {
	s.Phase, s.LastError, s.SourceCommit = intern(s.Phase), intern(s.LastError), intern(s.SourceCommit)
	s.UnplacedReason, s.LastRun = intern(s.UnplacedReason), intern(s.LastRun)
	for i := range s.Conditions {
		c := &s.Conditions[i]
		c.Type, c.Status, c.Reason, c.Message = intern(c.Type), intern(c.Status), intern(c.Reason), intern(c.Message)
	}
}

// InternRollout replaces the strings of r that many workloads share by
// canonical copies, for a cache that holds r.
func InternRollout(r *api.Rollout) {
	for g, o := range r.Outcomes {
		r.Outcomes[g] = intern(o)
	}
	for i := range r.Nodes {
		r.Nodes[i].Node = intern(r.Nodes[i].Node)
	}
	if f := r.Failure; f != nil {
		f.Message, f.Reason = intern(f.Message), intern(f.Reason)
	}
}
