package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// ErrQuorumFull is returned by AddLearner when the cluster has as many
// members as it may have.
var ErrQuorumFull = errors.New("store: etcd quorum is full")

// ErrMemberJoining is returned by AddLearner while another member is a
// learner still (etcd allows one at a time): retry once it is promoted.
var ErrMemberJoining = errors.New("store: another etcd member is joining")

// Member is one member of the etcd cluster.
type Member struct {
	// ID is etcd's member ID.
	ID uint64
	// Name is the member's name (the node's); empty until a member that
	// was added has started.
	Name string
	// PeerURLs and ClientURLs are where members and clients reach it.
	PeerURLs, ClientURLs []string
	// Learner is set until the member is promoted to a voter.
	Learner bool
}

// Members lists the etcd cluster's members.
func (s *Etcd) Members(ctx context.Context) ([]Member, error) {
	resp, err := s.cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	return members(resp.Members), nil
}

func members(ms []*etcdserverpb.Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, Learner: m.IsLearner})
	}
	return out
}

// AddLearner adds a learner (a non-voting member) at peerURL named name,
// unless the cluster has max members already (ErrQuorumFull) or another
// learner (ErrMemberJoining). A member of that peer URL that has not
// started yet (an earlier attempt of the same join) is kept. It returns
// the new member's ID and the etcd InitialCluster the learner starts with
// ("name=peerURL,..." of every member).
func (s *Etcd) AddLearner(ctx context.Context, name, peerURL string, maxMembers int) (uint64, string, error) {
	have, err := s.Members(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("add etcd member %s: %w", name, err)
	}
	id, err := planLearner(have, name, peerURL, maxMembers)
	if err != nil {
		return 0, "", fmt.Errorf("add etcd member %s: %w", name, err)
	}
	if id == 0 {
		err := retryMembership(ctx, func() error {
			resp, err := s.cli.MemberAddAsLearner(ctx, []string{peerURL})
			if errors.Is(err, rpctypes.ErrPeerURLExist) {
				// An attempt that timed out was applied after all.
				if have, err = s.Members(ctx); err != nil {
					return err
				}
				id, err = planLearner(have, name, peerURL, maxMembers)
				return err
			}
			if err != nil {
				return err
			}
			id, have = resp.Member.ID, members(resp.Members)
			return nil
		})
		if err != nil {
			return 0, "", fmt.Errorf("add etcd member %s at %s: %w", name, peerURL, err)
		}
	}
	var parts []string
	for _, m := range have {
		n := m.Name
		if m.ID == id {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return id, strings.Join(parts, ","), nil
}

// CheckRoom returns the error AddLearner would return for a member named
// name at peerURL without adding it: ErrQuorumFull, ErrMemberJoining or
// nil.
func (s *Etcd) CheckRoom(ctx context.Context, name, peerURL string, maxMembers int) error {
	have, err := s.Members(ctx)
	if err != nil {
		return fmt.Errorf("check room for etcd member %s: %w", name, err)
	}
	_, err = planLearner(have, name, peerURL, maxMembers)
	return err
}

// planLearner decides whether a member named name at peerURL may be added
// to have: the ID of a member of that peer URL that exists already (a
// retried join), 0 to add one, or why not.
func planLearner(have []Member, name, peerURL string, maxMembers int) (uint64, error) {
	var names []string
	taken := ""
	for _, m := range have {
		if slices.Contains(m.PeerURLs, peerURL) {
			if m.Name == "" || m.Name == name {
				return m.ID, nil
			}
			taken = m.Name
		}
		names = append(names, cmp.Or(m.Name, "(starting)"))
	}
	if len(have) >= maxMembers {
		return 0, fmt.Errorf("%w: it has %d of %d members (%s)", ErrQuorumFull, len(have), maxMembers, strings.Join(names, ", "))
	}
	for _, m := range have {
		if m.Learner {
			return 0, fmt.Errorf("%w: %s is not promoted yet", ErrMemberJoining, cmp.Or(m.Name, strings.Join(m.PeerURLs, ",")))
		}
	}
	if taken != "" {
		return 0, fmt.Errorf("%w: peer URL %s belongs to member %s", ErrInvalidArgument, peerURL, taken)
	}
	return 0, nil
}

// PromoteMember makes learner id a voting member, retrying while etcd
// says the learner is not in sync yet or the cluster is unhealthy (for a
// few seconds after a change of members), until ctx ends. A member that
// is a voter already is not an error.
func (s *Etcd) PromoteMember(ctx context.Context, id uint64) error {
	err := retryMembership(ctx, func() error {
		_, err := s.cli.MemberPromote(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return nil
		}
		return err
	}, rpctypes.ErrMemberLearnerNotReady)
	if err != nil {
		return fmt.Errorf("promote etcd member %x: %w", id, err)
	}
	return nil
}

// membershipRetry is the pause between attempts of a change of members
// that etcd refused for now.
const membershipRetry = 200 * time.Millisecond

// transientMembership are the answers to a change of members that a retry
// may turn into success: etcd refuses a change for a few seconds after
// another one (ErrUnhealthy), and a change in flight during a raft
// election times out (a change that was applied then is not repeated:
// callers treat "done already" as success).
var transientMembership = []error{
	rpctypes.ErrUnhealthy, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
	rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader,
}

// retryMembership calls change until it succeeds, fails with an error
// other than transientMembership and also, or ctx ends.
func retryMembership(ctx context.Context, change func() error, also ...error) error {
	retry := append(slices.Clone(transientMembership), also...)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		err := change()
		if err == nil {
			return nil
		}
		if !slices.ContainsFunc(retry, func(e error) bool { return errors.Is(err, e) }) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
		t.Reset(membershipRetry)
	}
}

// RemoveMember removes the member named name, or at peerURL (a member
// that never started has no name), from the etcd cluster, and reports
// whether there was one. etcd refuses (ErrUnhealthy) when the
// removal would leave the cluster without a quorum of started members.
func (s *Etcd) RemoveMember(ctx context.Context, name, peerURL string) (bool, error) {
	have, err := s.Members(ctx)
	if err != nil {
		return false, fmt.Errorf("remove etcd member %s: %w", name, err)
	}
	for _, m := range have {
		if m.Name != name && (m.Name != "" || !slices.Contains(m.PeerURLs, peerURL)) {
			continue
		}
		// A change of members right after another one is refused for a
		// few seconds.
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := retryMembership(rctx, func() error {
			_, err := s.cli.MemberRemove(rctx, m.ID)
			if errors.Is(err, rpctypes.ErrMemberNotFound) {
				return nil
			}
			return err
		})
		cancel()
		if err != nil {
			return false, fmt.Errorf("remove etcd member %s: %w", name, err)
		}
		return true, nil
	}
	return false, nil
}

// ErrLastMember is returned by LeaveQuorum for the only voting member: the
// cluster's data would go with it.
var ErrLastMember = errors.New("store: the only voting etcd member cannot leave")

// ErrNoQuorumLeft is returned by LeaveQuorum when the members left would
// not have a quorum of started members.
var ErrNoQuorumLeft = errors.New("store: the etcd members left would have no quorum")

// planLeave returns the ID of member name, which leaves have, and how many
// voting members stay; ok is false when name is no member. It refuses
// (ErrLastMember) when name is the only voting member, and
// (ErrNoQuorumLeft) when fewer of the voting members that stay are started
// than their quorum. It is pure.
func planLeave(have []Member, name string, started func(Member) bool) (id uint64, voters int, ok bool, err error) {
	up := 0
	var down []string
	for _, m := range have {
		switch {
		case m.Name == name:
			id, ok = m.ID, true
		case m.Learner:
		case started(m):
			voters++
			up++
		default:
			voters++
			down = append(down, cmp.Or(m.Name, strings.Join(m.PeerURLs, ",")))
		}
	}
	switch {
	case !ok:
		return 0, 0, false, nil
	case voters == 0:
		return 0, 0, true, fmt.Errorf("%w: %s is the only one of %d", ErrLastMember, name, len(have))
	case up < voters/2+1:
		return 0, 0, true, fmt.Errorf("%w: %d voting members would stay, %d of them started (not %s), fewer than their quorum of %d",
			ErrNoQuorumLeft, voters, up, strings.Join(down, ", "), voters/2+1)
	}
	return id, voters, true, nil
}

// LeaveQuorum removes member name from the etcd cluster when that leaves
// a quorum: never the only voting member (ErrLastMember), and only when
// enough of the voting members that stay are started, as started tells, to
// form their quorum (ErrNoQuorumLeft); etcd's own check of the members it
// sees connected may refuse it too (ErrNoQuorumLeft, after retrying for
// leaveWait). It returns how many voting members stay, and 0, nil when name
// is no member.
//
// A member that removes itself through its own etcd server may get no
// answer: the server stops as it applies its own removal, and the call
// fails with ErrMemberStopped although the member left. The caller, who
// knows that server, asks it (Embedded.RemovedFromCluster); the count of
// voting members that stay comes with that error.
func (s *Etcd) LeaveQuorum(ctx context.Context, name string, started func(Member) bool) (int, error) {
	have, err := s.Members(ctx)
	if err != nil {
		return 0, fmt.Errorf("leave the etcd quorum: %w", err)
	}
	id, voters, ok, err := planLeave(have, name, started)
	if err != nil || !ok {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, leaveWait)
	defer cancel()
	err = retryMembership(rctx, func() error {
		_, err := s.cli.MemberRemove(rctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil
		}
		return err
	})
	if errors.Is(err, rpctypes.ErrUnhealthy) {
		return 0, fmt.Errorf("%w: etcd finds too few of the %d voting members that would stay connected", ErrNoQuorumLeft, voters)
	}
	if errors.Is(err, rpctypes.ErrStopped) {
		return voters, fmt.Errorf("leave the etcd quorum: %w: %w", ErrMemberStopped, err)
	}
	if err != nil {
		return 0, fmt.Errorf("leave the etcd quorum: %w", err)
	}
	return voters, nil
}

// ErrMemberStopped means the etcd server a membership change went to
// stopped before it answered (LeaveQuorum).
var ErrMemberStopped = errors.New("the etcd server asked stopped before it answered")

// leaveWait bounds LeaveQuorum's retries while etcd refuses the removal
// (for a few seconds after another change of members).
const leaveWait = 10 * time.Second
