package node

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/store"
)

// controlSocket is the unix socket, in the data directory, on which a
// running kat-agent takes commands from kat-agent run on the same machine
// (RequestDeparture). The data directory's permissions guard it: only its
// owner (root) reaches it.
func (d dataDir) controlSocket() string { return d.path("agent.sock") }

// The control socket's protocol: the client writes one command line; the
// agent answers lines of progress, then one final line, controlDone or
// controlFailed and a message.
const (
	commandDepart   = "depart"
	controlProgress = "progress: "
	controlDone     = "done: "
	controlFailed   = "failed: "
	// controlReadTimeout bounds the wait for a client's command.
	controlReadTimeout = 5 * time.Second
)

// departure is this node's departure for good: asked for by Options.Depart
// (SIGUSR1) or through the control socket, run once by runDeparture.
type departure struct {
	ask  chan struct{}
	done chan struct{}
	// msg and err are what the departure came to; set before done closes.
	msg string
	err error
}

func newDeparture() *departure {
	return &departure{ask: make(chan struct{}, 1), done: make(chan struct{})}
}

// request asks for the departure; asking again changes nothing.
func (d *departure) request() {
	select {
	case d.ask <- struct{}{}:
	default:
	}
}

// departed returns the error the node's departure ended with (wrapping
// agent.ErrDeparted), or nil while it has not departed.
func (d *departure) departed() error {
	if d == nil {
		return nil
	}
	select {
	case <-d.done:
		if errors.Is(d.err, agent.ErrDeparted) {
			return d.err
		}
	default:
	}
	return nil
}

// runDeparture waits until the departure is asked for, then departs
// (agent.Depart with cfg) and, on an etcd member, leaves the etcd quorum
// when that leaves a quorum (leaveQuorum). It returns the departure's
// error, which wraps agent.ErrDeparted once the node departed, or nil when
// ctx ends first.
func (n *Node) runDeparture(ctx context.Context, d *departure, cfg agent.DepartConfig) error {
	select {
	case <-ctx.Done():
		return nil
	case <-n.opts.Depart:
	case <-d.ask:
	}
	n.log.Info().Msg("departing: telling the leader, waiting for the Service and DaemonService instances to leave")
	err := agent.Depart(ctx, cfg)
	msg := "the node departed"
	if errors.Is(err, agent.ErrDeparted) && n.embed != nil && n.etcd != nil {
		n.handOverLeadership(ctx)
		msg += "; " + n.leaveQuorum(ctx)
	}
	d.msg, d.err = msg, err
	close(d.done)
	return err
}

// handOverWait bounds how long a departing member waits for its campaign
// for leadership to end.
const handOverWait = 5 * time.Second

// handOverLeadership ends a departing member's campaign for leadership,
// resigning it when the member leads, so that another member leads at once
// (not once the election lease runs out) while the etcd quorum still has
// this member; it returns when the campaign ended, ctx ended or
// handOverWait passed.
func (n *Node) handOverLeadership(ctx context.Context) {
	if n.stopCampaign == nil {
		return
	}
	n.stopCampaign()
	t := time.NewTimer(handOverWait)
	defer t.Stop()
	select {
	case <-n.campaignDone:
		n.log.Info().Str("component", "depart").Msg("departing: no longer a candidate for leadership")
	case <-t.C:
		n.log.Warn().Str("component", "depart").Msg("departing: the campaign for leadership did not end in time")
	case <-ctx.Done():
	}
}

// leaveQuorum removes this member from the etcd quorum when the members
// left keep a quorum of started ones (store.Etcd.LeaveQuorum: a member
// counts as started while its node is Ready), and records it in the node's
// state, so that a later start says to join again instead of starting an
// etcd member that is gone. It returns what it did, for the log and the
// control socket; a refusal keeps the member.
func (n *Node) leaveQuorum(ctx context.Context) string {
	log := n.log.With().Str("component", "depart").Logger()
	nodes, err := n.repo.ListNodes(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("departing: cannot tell which etcd members run: staying an etcd member")
		return fmt.Sprintf("still an etcd member: cannot tell which members run: %v", err)
	}
	now, loss := time.Now(), time.Duration(n.state.Cluster.Spec.NodeLossTimeoutSeconds)*time.Second
	ready := map[string]bool{}
	for _, nd := range nodes {
		ready[nd.Registration.Name] = nd.Ready(now, loss)
	}
	// The others' client URLs, while this member can still list them: they
	// can tell whether it left if its own server stops without answering.
	var others []string
	if ms, err := n.etcd.Members(ctx); err == nil {
		for _, m := range ms {
			if m.Name != n.state.NodeName {
				others = append(others, m.ClientURLs...)
			}
		}
	}
	n.leftQuorum.Store(true) // from here the embedded etcd may stop under us
	voters, err := n.etcd.LeaveQuorum(ctx, n.state.NodeName, func(m store.Member) bool { return ready[m.Name] })
	if errors.Is(err, store.ErrMemberStopped) && n.removedFromQuorum(ctx, others) {
		err = nil // its own etcd stopped before it answered, but it left
	}
	if err != nil {
		n.leftQuorum.Store(false)
		log.Warn().Err(err).Msg("departing: staying an etcd member; delete the node (katcall delete node) once the other members run")
		return fmt.Sprintf("still an etcd member (delete the node with katcall delete node %s once the other members run): %v", n.state.NodeName, err)
	}
	if voters == 0 {
		return "not an etcd member any more"
	}
	st := *n.state
	st.LeftQuorum = true
	if err := saveNodeState(n.dir, &st); err != nil {
		log.Warn().Err(err).Msg("departing: cannot record that the node left the etcd quorum")
	}
	log.Info().Int("voting_members", voters).Msg("departing: left the etcd quorum")
	return fmt.Sprintf("left the etcd quorum, %d voting members stay", voters)
}

// removedFromQuorum reports whether this member is out of the etcd cluster
// once its own etcd server stopped during its removal: the server applied
// the removal, or the other members (reached at their client URLs others)
// no longer list it. A member can stop before it applies its removal: when
// the leader drops it first, the others tell it it was removed.
func (n *Node) removedFromQuorum(ctx context.Context, others []string) bool {
	if n.embed == nil {
		return false
	}
	if n.embed.RemovedFromCluster() {
		return true
	}
	if len(others) == 0 {
		return false
	}
	log := n.log.With().Str("component", "depart").Logger()
	st, err := n.rootClientOf(ctx, others)
	if err != nil {
		log.Warn().Err(err).Msg("departing: cannot ask the other etcd members whether this one left")
		return false
	}
	defer st.Close()
	ms, err := st.Members(ctx)
	if err != nil {
		log.Warn().Err(err).Msg("departing: cannot ask the other etcd members whether this one left")
		return false
	}
	return !slices.ContainsFunc(ms, func(m store.Member) bool { return m.Name == n.state.NodeName })
}

// serveControl serves the control socket until ctx ends, then waits for
// the connections it accepted. A socket it cannot serve (a data directory
// path too long for a unix socket, say) is logged and left: the node runs
// on, and SIGUSR1 still departs it.
func (n *Node) serveControl(ctx context.Context, d *departure) error {
	ln, err := listenControl(ctx, n.dir.controlSocket())
	if err != nil {
		n.log.Warn().Err(err).Msg("kat-agent depart cannot reach this agent; SIGUSR1 still departs it")
		<-ctx.Done()
		return nil
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("control socket: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			n.serveControlConn(ctx, conn, d)
		}()
	}
}

// listenControl listens on the control socket at path, removing a socket
// an agent that did not stop cleanly left there.
func listenControl(ctx context.Context, path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("control socket: remove the old %s: %w", path, err)
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// serveControlConn answers one command.
func (n *Node) serveControlConn(ctx context.Context, conn net.Conn, d *departure) {
	if err := conn.SetReadDeadline(time.Now().Add(controlReadTimeout)); err != nil {
		return
	}
	line, err := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
	if err != nil {
		return
	}
	// Writes fail only when the client went away: nothing to tell then.
	reply := func(kind, msg string) { _, _ = io.WriteString(conn, kind+msg+"\n") }
	switch cmd := strings.TrimSpace(line); cmd {
	case commandDepart:
		d.request()
		reply(controlProgress, "departing: the leader moves the Service instances and removes the DaemonService instances; waiting for them to leave")
	default:
		reply(controlFailed, fmt.Sprintf("unknown command %q (known: %s)", cmd, commandDepart))
		return
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		select {
		case <-d.done: // the departure's end stops the agent too
		default:
			reply(controlFailed, "the agent stopped before the departure ended")
			return
		}
	}
	if errors.Is(d.err, agent.ErrDeparted) && !errors.Is(d.err, context.DeadlineExceeded) {
		reply(controlDone, d.msg)
		return
	}
	reply(controlFailed, fmt.Sprintf("%s: %v", d.msg, d.err))
}

// RequestDeparture asks the kat-agent running with data directory dir
// to depart for good (kat-agent depart), writes its progress to out, and
// waits until it departed. It returns an error when no agent answers, or
// when the departure failed or did not end cleanly.
func RequestDeparture(ctx context.Context, dir string, out io.Writer) error {
	path := dataDir(dir).controlSocket()
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("reach the kat-agent of data directory %s (is it running?): %w", dir, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := io.WriteString(conn, commandDepart+"\n"); err != nil {
		return fmt.Errorf("ask the kat-agent to depart: %w", err)
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, controlProgress):
			fmt.Fprintln(out, strings.TrimPrefix(line, controlProgress))
		case strings.HasPrefix(line, controlDone):
			fmt.Fprintln(out, strings.TrimPrefix(line, controlDone))
			return nil
		case strings.HasPrefix(line, controlFailed):
			return fmt.Errorf("depart: %s", strings.TrimPrefix(line, controlFailed))
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("depart: %w", ctx.Err())
	}
	return fmt.Errorf("depart: the kat-agent closed the connection before the departure ended: %w", cmp.Or(sc.Err(), io.ErrUnexpectedEOF))
}
