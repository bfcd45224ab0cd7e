package rejoin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Respond answers the valid requests heard on conn until ctx ends (then
// nil): answer returns the signed answer to a request, sent back to where
// the request came from. onIgnored, when not nil, hears why each other
// message was ignored.
func Respond(ctx context.Context, conn net.PacketConn, v *Verifier, answer func(Request) ([]byte, error), onIgnored func(error)) error {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	if onIgnored == nil {
		onIgnored = func(error) {}
	}
	buf := make([]byte, maxMessage+1)
	for {
		n, from, err := conn.ReadFrom(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read rejoin requests: %w", err)
		}
		r, err := v.Request(buf[:n], time.Now())
		if err != nil {
			onIgnored(err)
			continue
		}
		b, err := answer(*r)
		if err != nil {
			onIgnored(fmt.Errorf("answer node %s: %w", r.Node, err))
			continue
		}
		if _, err := conn.WriteTo(b, from); err != nil {
			onIgnored(fmt.Errorf("answer node %s at %s: %w", r.Node, from, err))
		}
	}
}

// Ask sends the signed request b (of req) to over conn and returns the
// first valid answer heard within wait; other messages are skipped.
func Ask(ctx context.Context, conn net.PacketConn, to net.Addr, b []byte, req Request, v *Verifier, wait time.Duration) (*Answer, error) {
	if _, err := conn.WriteTo(b, to); err != nil {
		return nil, fmt.Errorf("send the rejoin request to %s: %w", to, err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return nil, fmt.Errorf("wait for rejoin answers: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, maxMessage+1)
	var last error
	for {
		n, _, err := conn.ReadFrom(buf)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			if last != nil {
				return nil, fmt.Errorf("no valid answer to the rejoin request within %s (last: %w)", wait, last)
			}
			return nil, fmt.Errorf("no answer to the rejoin request within %s", wait)
		case err != nil:
			return nil, fmt.Errorf("read rejoin answers: %w", err)
		}
		a, err := v.Answer(buf[:n], req, time.Now())
		if err == nil {
			return a, nil
		}
		last = err
	}
}
