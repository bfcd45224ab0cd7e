package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/internal/frames"
	"kat.dws.rip/kat/runtime"
)

// ExecFunc runs command in the container of an instance, as eio asks, and
// returns its exit status (see runtime.Podman.ExecInteractive).
type ExecFunc func(ctx context.Context, command []string, eio runtime.ExecIO) (int, error)

// execParams reads the command, stdin and tty of an exec request, and
// checks that it asks for the exec protocol.
func execParams(r *http.Request) (cmd []string, stdin, tty bool, apiErr *api.Error) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.ExecProtocol) {
		return nil, false, false, &api.Error{StatusCode: http.StatusUpgradeRequired, Code: api.CodeBadRequest,
			Message: "exec needs the header Upgrade: " + api.ExecProtocol + " (use katcall exec)"}
	}
	q := r.URL.Query()
	cmd = q[api.ExecParamCommand]
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, false, false, badRequest("%s: the command to run is required", api.ExecParamCommand)
	}
	for _, b := range []struct {
		name string
		to   *bool
	}{{api.ExecParamStdin, &stdin}, {api.ExecParamTTY, &tty}} {
		if v := q.Get(b.name); v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				return nil, false, false, badRequest("%s: %q is not true or false", b.name, v)
			}
			*b.to = x
		}
	}
	return cmd, stdin, tty, nil
}

// serveExec answers an exec request of the agent API: it upgrades the
// connection and runs the command of run over frames until it exits or
// the client goes away (which kills it).
func serveExec(w http.ResponseWriter, r *http.Request, cfg AgentConfig) {
	id := chi.URLParam(r, "id")
	cmd, stdin, tty, apiErr := execParams(r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if cfg.Exec == nil {
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: "this node does not run commands"})
		return
	}
	run, err := cfg.Exec(r.Context(), id)
	switch {
	case errors.Is(err, ErrUnknownInstance):
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound,
			Message: fmt.Sprintf("instance %s does not run on this node", id)})
		return
	case err != nil:
		writeError(w, &api.Error{StatusCode: http.StatusConflict, Code: api.CodeConflict,
			Message: fmt.Sprintf("run a command in instance %s: %v", id, err)})
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, &api.Error{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal,
			Message: fmt.Sprintf("take over the connection: %v", err)})
		return
	}
	defer conn.Close()
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.ExecProtocol + "\r\n\r\n"); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	// The request's context outlives a hijacked connection: the command's
	// ends when the client goes (its frames end) or the server stops.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	fw := frames.NewWriter(conn)
	eio := runtime.ExecIO{Stdout: fw.Stream(frames.Stdout), Stderr: fw.Stream(frames.Stderr), TTY: tty}
	pr, pw := io.Pipe()
	if stdin {
		eio.Stdin = pr
	}
	resize := make(chan runtime.TermSize, 1)
	if tty {
		eio.Resize = resize
	}
	var reading sync.WaitGroup
	reading.Go(func() {
		defer cancel()
		err := readClientFrames(ctx, frames.NewReader(brw.Reader), pw, resize)
		pw.CloseWithError(err)
	})
	code, err := run(ctx, cmd, eio)
	if err != nil {
		cfg.Logger.Warn().Err(err).Str("instance", id).Msg("exec failed")
		_ = fw.Write(frames.Error, []byte(err.Error()))
	} else {
		_ = fw.Write(frames.Exit, []byte(strconv.Itoa(code)))
		cfg.Logger.Info().Str("instance", id).Int("exit_code", code).Msg("exec ended")
	}
	// Ends the reading of the client's frames, wherever it waits.
	_ = conn.Close()
	_ = pr.Close()
	reading.Wait()
}

// readClientFrames passes the client's input frames to stdin and its
// terminal sizes to resize, until the client's frames end (the error
// says why: io.EOF when the connection closed).
func readClientFrames(ctx context.Context, fr *frames.Reader, stdin *io.PipeWriter, resize chan runtime.TermSize) error {
	for {
		ch, p, err := fr.Next()
		if err != nil {
			return err
		}
		switch ch {
		case frames.Stdin:
			if len(p) == 0 {
				_ = stdin.Close()
				continue
			}
			if _, err := stdin.Write(p); err != nil && !errors.Is(err, io.ErrClosedPipe) {
				return err
			}
		case frames.Resize:
			s, err := frames.DecodeSize(p)
			if err != nil {
				return err
			}
			select { // only the newest size matters
			case <-resize:
			default:
			}
			select {
			case resize <- runtime.TermSize{Rows: s.Rows, Cols: s.Cols}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// workloadExec runs a command in an instance of a workload (?instance=,
// else the first running one) through the agent of its node: the
// connection is upgraded end to end (api.ExecProtocol) and the audit log
// records the instance and the command, never its output.
func (s *Server) workloadExec(w http.ResponseWriter, r *http.Request) {
	ns, name, ok := s.workloadParams(w, r)
	if !ok {
		return
	}
	cmd, _, _, apiErr := execParams(r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	ctx := r.Context()
	ins, err := s.workloadInstances(ctx, ns, name)
	if err != nil {
		writeError(w, errorFor(err))
		return
	}
	want := r.URL.Query().Get(api.ExecParamInstance)
	i := slices.IndexFunc(ins, func(in api.Instance) bool {
		return in.InstanceID == want || want == "" && in.Status.Phase == api.InstanceRunning
	})
	if i < 0 {
		msg := fmt.Sprintf("workload %s/%s has no running instance", ns, name)
		if want != "" {
			msg = fmt.Sprintf("workload %s/%s has no instance %q", ns, name, want)
		}
		writeError(w, &api.Error{StatusCode: http.StatusNotFound, Code: api.CodeNotFound, Message: msg})
		return
	}
	in := ins[i]
	noteDetail(r, fmt.Sprintf("instance %s: %q", in.InstanceID, cmd))
	target, apiErr := s.agentURL(ctx, in.Node, "/v1alpha1/instances/"+url.PathEscape(in.InstanceID)+"/exec", r.URL.Query())
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	w.Header().Set(api.HeaderInstance, in.InstanceID)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = ""
			pr.Out.Header.Del("Authorization") // the agent trusts this node's certificate, not the token
		},
		Transport: s.agentUpgrades,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeError(w, &api.Error{StatusCode: http.StatusBadGateway, Code: api.CodeInternal,
				Message: fmt.Sprintf("reach the agent of node %s: %v", in.Node, err)})
		},
	}
	s.cfg.Logger.Info().Str("workload", ns+"/"+name).Str("instance", in.InstanceID).Str("node", in.Node).
		Strs("command", cmd).Msg("exec")
	proxy.ServeHTTP(w, r)
}

// http1Only returns rt speaking HTTP/1.1 only, when it is an
// *http.Transport: a connection upgrade (exec) has no HTTP/2 form.
func http1Only(rt http.RoundTripper) http.RoundTripper {
	tr, ok := rt.(*http.Transport)
	if !ok || tr == nil {
		return rt
	}
	return apiclient.HTTP1Only(tr)
}
