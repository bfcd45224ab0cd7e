package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// ErrDeparted is what a node's agent returns once it departed (Depart):
// kat-agent exits with its own status, which systemd does not restart.
var ErrDeparted = errors.New("agent: the node departed")

// DefaultDepartWait bounds how long a departing agent waits for its
// Service instances to move and its DaemonService instances to go.
const DefaultDepartWait = 2 * time.Minute

// DepartConfig is what Depart needs.
type DepartConfig struct {
	// Node is this node's name; Facts its road to the leader; Repo where
	// its assignments are read. Required.
	Node  string
	Facts Facts
	Repo  *resources.Repo
	// StartedAt is when this agent started (HeartbeatConfig.StartedAt).
	StartedAt time.Time
	// Leftovers counts the containers of instances no longer assigned
	// that the agent still has to remove (Agent.Leftovers); the departure
	// waits for none to be left too. Default nil: not waited for.
	Leftovers func() int
	// Wait bounds the wait for the Service and DaemonService instances to
	// leave. Default DefaultDepartWait.
	Wait time.Duration
}

// Depart tells the leader that the node leaves for good, so its Service
// instances are placed on other nodes at once and its DaemonService
// instances are deleted, and waits (up to cfg.Wait) until none of them is
// assigned to the node any more and the agent, still running, has stopped
// and removed their containers (cfg.Leftovers). It returns ErrDeparted once
// done, or an error when the leader could not be told. Job instances are
// not waited for: the leader gives them up as on a lost node, and the job's
// backoffLimit decides whether they run again elsewhere.
func Depart(ctx context.Context, cfg DepartConfig) error {
	if err := cfg.Facts.RecordDeparture(ctx, cfg.Node, api.NodeDeparture{AgentStartedAt: cfg.StartedAt}); err != nil {
		return fmt.Errorf("depart: %w", err)
	}
	wait := cfg.Wait
	if wait <= 0 {
		wait = DefaultDepartWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := poll.Wait(wctx, func() (bool, error) {
		as, err := cfg.Repo.ListAssignmentsWithoutFiles(wctx, cfg.Node)
		if err != nil {
			return false, err // etcd may be slow to answer: ask again until the deadline
		}
		for _, a := range as {
			if a.Type == quadlet.TypeService || a.Type == quadlet.TypeDaemonService {
				return false, nil
			}
		}
		return cfg.Leftovers == nil || cfg.Leftovers() == 0, nil
	})
	if err != nil {
		return fmt.Errorf("depart: the Service and DaemonService instances did not all leave within %s: %w", wait, errors.Join(ErrDeparted, err))
	}
	return ErrDeparted
}
