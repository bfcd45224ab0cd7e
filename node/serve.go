package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// shutdownGrace bounds how long in-flight requests may take at shutdown.
const shutdownGrace = 10 * time.Second

// serveTLS serves srv on ln until ctx ends, then shuts it down, giving
// in-flight requests shutdownGrace to finish. srv.TLSConfig holds the
// certificate. what names the server in errors.
func serveTLS(ctx context.Context, srv *http.Server, ln net.Listener, what string) error {
	return serveUntil(ctx, srv, func() error { return srv.ServeTLS(ln, "", "") }, what)
}

// serveUntil runs serve (srv's Serve or ServeTLS) until ctx ends, then shuts
// srv down as serveTLS does.
func serveUntil(ctx context.Context, srv *http.Server, serve func() error, what string) error {
	errc := make(chan error, 1)
	go func() {
		err := serve()
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("serve %s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; serr != nil {
		return fmt.Errorf("serve %s: %w", what, serr)
	}
	if err != nil {
		return fmt.Errorf("shut down %s: %w", what, err)
	}
	return nil
}
