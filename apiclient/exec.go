package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/frames"
)

// ExecRequest is a command to run in an instance of a workload.
type ExecRequest struct {
	// Instance names the instance; empty: the first running one.
	Instance string
	// Command is the program and its arguments. Required.
	Command []string
	// Stdin, when set, is passed to the command as its input; its end
	// closes the command's input. Default nil: none.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output (with TTY, all of it
	// on Stdout).
	Stdout, Stderr io.Writer
	// TTY gives the command a terminal.
	TTY bool
	// Resize, with TTY, carries the sizes of the caller's terminal, the
	// first one at once.
	Resize <-chan frames.Size
}

// ErrExecFailed wraps the reason a command could not run, or went on, as
// the node reported it.
var ErrExecFailed = errors.New("apiclient: exec failed")

// Exec runs req.Command in an instance of workload ns/name, on whichever
// node runs it (the API server passes the connection on to its agent),
// and returns the command's exit status once it ends. Ending ctx kills
// the command. The goroutine that reads req.Stdin ends when Stdin returns
// an error or EOF.
func (c *Client) Exec(ctx context.Context, ns, name string, req ExecRequest) (int, error) {
	q := url.Values{api.ExecParamCommand: req.Command}
	if req.Instance != "" {
		q.Set(api.ExecParamInstance, req.Instance)
	}
	if req.Stdin != nil {
		q.Set(api.ExecParamStdin, "true")
	}
	if req.TTY {
		q.Set(api.ExecParamTTY, "true")
	}
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok {
		return 0, errors.New("exec: the client's transport cannot upgrade a connection")
	}
	tr = HTTP1Only(tr)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	h := http.Header{"Connection": {"Upgrade"}, "Upgrade": {api.ExecProtocol}}
	resp, err := c.send(ctx, hc, http.MethodPost, workloadsPath(ns)+"/"+url.PathEscape(name)+"/exec", q, nil, h)
	if err != nil {
		return 0, fmt.Errorf("exec in %s/%s: %w", ns, name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		if resp.StatusCode < 400 {
			return 0, fmt.Errorf("exec in %s/%s: the server answered %s, not an upgrade", ns, name, resp.Status)
		}
		return 0, errorOf(resp)
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		return 0, fmt.Errorf("exec in %s/%s: the upgraded connection cannot be written", ns, name)
	}
	// Closing the connection when ctx ends ends the command (the node
	// kills it) and the frame reading below.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	fw := frames.NewWriter(conn)
	done := make(chan struct{})
	defer close(done)
	if req.Stdin != nil {
		go func() {
			if _, err := io.Copy(fw.Stream(frames.Stdin), req.Stdin); err == nil {
				_ = fw.Write(frames.Stdin, nil) // the end of the input
			}
		}()
	}
	if req.Resize != nil {
		go func() {
			for {
				select {
				case s, ok := <-req.Resize:
					if !ok || fw.Write(frames.Resize, s.Encode()) != nil {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	return readExecFrames(ctx, frames.NewReader(conn), req.Stdout, req.Stderr)
}

// HTTP1Only returns a copy of tr that speaks HTTP/1.1 only, for requests
// that upgrade the connection (exec): an upgrade has no HTTP/2 form. Both
// the transport's protocols and what its TLS handshake offers (ALPN) are
// set, or a server that speaks HTTP/2 would answer in it.
func HTTP1Only(tr *http.Transport) *http.Transport {
	tr = tr.Clone()
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	if tr.TLSClientConfig != nil {
		tr.TLSClientConfig = tr.TLSClientConfig.Clone()
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	return tr
}

// readExecFrames writes the command's output frames and returns its exit
// status.
func readExecFrames(ctx context.Context, fr *frames.Reader, stdout, stderr io.Writer) (int, error) {
	for {
		ch, p, err := fr.Next()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("exec: the connection ended before the command did: %w", err)
		}
		switch ch {
		case frames.Stdout:
			if _, err := stdout.Write(p); err != nil {
				return 0, fmt.Errorf("exec: write the output: %w", err)
			}
		case frames.Stderr:
			if _, err := stderr.Write(p); err != nil {
				return 0, fmt.Errorf("exec: write the error output: %w", err)
			}
		case frames.Exit:
			code, err := strconv.Atoi(string(p))
			if err != nil {
				return 0, fmt.Errorf("exec: exit status %q: %w", p, err)
			}
			return code, nil
		case frames.Error:
			return 0, fmt.Errorf("%w: %s", ErrExecFailed, p)
		}
	}
}
