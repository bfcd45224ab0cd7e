package apiserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
)

// allLogsRelist is how often a followed log of every instance of a
// workload looks for new instances.
const allLogsRelist = 2 * time.Second

// agentURL is the URL of path on the agent API of node.
func (s *Server) agentURL(ctx context.Context, node, path string, query url.Values) (*url.URL, *api.Error) {
	if s.cfg.AgentTransport == nil {
		return nil, &api.Error{StatusCode: http.StatusServiceUnavailable, Code: api.CodeInternal, Message: "this server cannot reach agents"}
	}
	reg, err := s.cfg.Repo.GetNodeRegistration(ctx, node)
	if err != nil {
		return nil, errorFor(err)
	}
	return &url.URL{Scheme: "https", Host: net.JoinHostPort(reg.AdvertiseAddress, strconv.Itoa(reg.AgentPort)),
		Path: path, RawQuery: query.Encode()}, nil
}

// callAgent sends GET path to the agent API of node. The caller closes
// the answer's body.
func (s *Server) callAgent(ctx context.Context, node, path string, query url.Values) (*http.Response, *api.Error) {
	u, apiErr := s.agentURL(ctx, node, path, query)
	if apiErr != nil {
		return nil, apiErr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, errorFor(err)
	}
	resp, err := (&http.Client{Transport: s.cfg.AgentTransport}).Do(req)
	if err != nil {
		return nil, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
			Message: fmt.Sprintf("reach the agent of node %s: %v", node, err)}
	}
	return resp, nil
}

// instanceLogPath is the agent API's path of an instance's logs.
func instanceLogPath(id string) string { return "/v1alpha1/instances/" + url.PathEscape(id) + "/logs" }

// workloadLogs proxies an instance's logs from the agent that runs it
// (the one ?instance= names, else the first), with ?all=true those of
// every instance, or with ?build=true the log of a build (buildLog).
func (s *Server) workloadLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if isBuild, err := boolQuery(r, "build"); err != nil {
		writeError(w, badRequest("%v", err))
		return
	} else if isBuild {
		s.buildLog(w, r, ns, name)
		return
	}
	opts, err := api.ParseLogOptions(q.Get, s.cfg.Now())
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	all, err := boolQuery(r, api.LogParamAll)
	if err != nil {
		writeError(w, badRequest("%v", err))
		return
	}
	want := q.Get("instance")
	if all && want != "" {
		writeError(w, badRequest("%s: every instance, or the one instance names: not both", api.LogParamAll))
		return
	}
	ctx := r.Context()
	if _, err := s.cfg.Repo.GetWorkload(ctx, ns, name); err != nil {
		writeError(w, errorFor(err))
		return
	}
	ins, err := s.workloadInstances(ctx, ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	i := slices.IndexFunc(ins, func(in api.Instance) bool { return want == "" || in.InstanceID == want })
	if i < 0 && (!all || !opts.Follow) {
		msg := fmt.Sprintf("workload %s/%s has no instances yet", ns, name)
		if want != "" {
			msg = fmt.Sprintf("workload %s/%s has no instance %q", ns, name, want)
		}
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: msg})
		return
	}
	if all {
		s.allLogs(w, r, ns, name, ins, opts)
		return
	}
	resp, apiErr := s.callAgent(ctx, ins[i].Node, instanceLogPath(ins[i].InstanceID), opts.Values())
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.Header().Set(api.HeaderInstance, ins[i].InstanceID)
	w.WriteHeader(resp.StatusCode)
	_ = copyFlushing(w, resp.Body)
}

// allLogs writes the logs of every instance of workload ns/name, each line
// prefixed with "[instanceID] ": one instance after another, or with
// opts.Follow all at once, the lines as they come, taking in instances
// that appear, until the client goes away. An instance whose log cannot
// be read gets one line that says why.
func (s *Server) allLogs(w http.ResponseWriter, r *http.Request, ns, name string, ins []api.Instance, opts api.LogOptions) {
	ctx := r.Context()
	out := &lockedFlusher{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_ = out.rc.Flush()
	if !opts.Follow {
		for _, in := range ins {
			s.prefixedLog(ctx, out, ns, name, in, opts)
		}
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	started := map[string]bool{}
	tick := time.NewTicker(allLogsRelist)
	defer tick.Stop()
	first := true
	for {
		for _, in := range ins {
			if started[in.InstanceID] {
				continue
			}
			started[in.InstanceID] = true
			o := opts
			if !first {
				o.Tail, o.Since = 0, time.Time{} // a new instance: all of it
			}
			wg.Go(func() { s.prefixedLog(ctx, out, ns, name, in, o) })
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		next, err := s.workloadInstances(ctx, ns, name)
		if err != nil {
			continue // the next tick tries again
		}
		ins = next
	}
}

// prefixedLog copies one instance's log to out, each line prefixed. A
// followed log whose stream ends or fails (the agent restarted, the
// connection broke) while the instance is still assigned is read again,
// after the last line it gave, with one line that says so; it ends when
// the instance is no longer assigned or ctx ends.
func (s *Server) prefixedLog(ctx context.Context, out *lockedFlusher, ns, name string, in api.Instance, opts api.LogOptions) {
	prefix := "[" + in.InstanceID + "] "
	if !opts.Follow {
		if msg := s.copyPrefixed(ctx, out, prefix, in, opts, nil); msg != "" {
			out.line(prefix + "cannot read the log: " + msg + "\n")
		}
		return
	}
	// Read with timestamps to resume after the last line; the client's
	// lines keep them only when it asked.
	lines := &stampedPrefix{keep: opts.Timestamps}
	opts.Timestamps = true
	wait := logResumeFirst
	interrupted := false
	for {
		msg := s.copyPrefixed(ctx, out, prefix, in, opts, lines)
		if ctx.Err() != nil {
			return
		}
		if lines.fresh {
			interrupted, wait, lines.fresh = false, logResumeFirst, false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if !s.stillAssigned(ctx, ns, name, in.InstanceID) {
			return
		}
		if !interrupted {
			if msg == "" {
				msg = "the agent ended it"
			}
			out.line(prefix + "log stream interrupted (" + msg + "): resuming\n")
			interrupted = true
		}
		wait = min(2*wait, logResumeMax)
		if !lines.last.IsZero() { // else as first asked (--tail, --since)
			opts.Tail, opts.Since = 0, lines.last
		}
	}
}

// Waits between tries to read a followed instance's log again.
const (
	logResumeFirst = 500 * time.Millisecond
	logResumeMax   = 8 * time.Second
)

// stillAssigned reports whether instance id of workload ns/name is still
// assigned (true when that cannot be read now: a later look decides).
func (s *Server) stillAssigned(ctx context.Context, ns, name, id string) bool {
	ins, err := s.workloadInstances(ctx, ns, name)
	if err != nil {
		return ctx.Err() == nil
	}
	return slices.ContainsFunc(ins, func(in api.Instance) bool { return in.InstanceID == id })
}

// copyPrefixed copies one stream of an instance's log to out, each line
// prefixed, through stamps when not nil (the stream has timestamps), and
// returns why the stream could not be read or broke ("" when it ended).
func (s *Server) copyPrefixed(ctx context.Context, out *lockedFlusher, prefix string, in api.Instance, opts api.LogOptions, stamps *stampedPrefix) string {
	resp, apiErr := s.callAgent(ctx, in.Node, instanceLogPath(in.InstanceID), opts.Values())
	if apiErr != nil {
		return apiErr.Message
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return errorMessage(b, resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if line[len(line)-1] != '\n' {
				line += "\n"
			}
			if stamps != nil {
				line = stamps.line(line)
			}
			if line != "" {
				out.line(prefix + line)
			}
		}
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return err.Error()
		}
	}
}

// stampedPrefix passes the lines of a log read with timestamps that come
// after the last one passed, without their timestamp unless keep.
type stampedPrefix struct {
	keep bool
	// last is the time of the last line passed; fresh says a line was
	// passed since it was last cleared.
	last  time.Time
	fresh bool
}

// line returns line as it is to be written ("" to leave it out).
func (p *stampedPrefix) line(line string) string {
	stamp, rest, ok := strings.Cut(line, " ")
	if !ok {
		return line
	}
	t, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return line
	}
	if !p.last.IsZero() && !t.After(p.last) {
		return "" // read before the stream was resumed
	}
	p.last, p.fresh = t, true
	if p.keep {
		return line
	}
	return rest
}

// lockedFlusher writes whole lines from several goroutines and flushes
// after each.
type lockedFlusher struct {
	mu sync.Mutex
	w  io.Writer
	rc *http.ResponseController
}

func (l *lockedFlusher) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := io.WriteString(l.w, s); err == nil {
		_ = l.rc.Flush()
	}
}
